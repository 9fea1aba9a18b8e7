"""``websailor view``: a local web app over run files (eval outputs, RL and SFT runs,
trajectory files, synthesized QA files), served by FastAPI with server-rendered templates
and our own small JavaScript and CSS (nothing is fetched from the internet).

Every file is read through the library's readers (:func:`websailor.eval.scoring.read_trajectories`,
:func:`websailor.eval.scoring.read_scores`, :func:`websailor.train.rl_log.read_log`,
:func:`websailor.synth.dataset.read_items`); every string reaches the page escaped; paths in URLs
never leave the root (:func:`websailor.view.discover.resolve`).
"""

from websailor.view.app import create_view_app
from websailor.view.discover import RunEntry, find_runs, resolve

__all__ = ["RunEntry", "create_view_app", "find_runs", "resolve"]
