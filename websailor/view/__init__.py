"""``websailor view``: a local web app over run files (eval outputs, RL and SFT runs,
trajectory files, synthesized QA files), served by FastAPI with server-rendered templates
and our own small JavaScript and CSS (nothing is fetched from the internet).

Every file is read under the library's rules and checks: JSONL files line by line through
:class:`websailor.jsonio.JsonlStream` (the rules of :func:`websailor.jsonio.read_appended_jsonl`:
an unfinished last line is left out and the page says so), trajectory and score lines checked by
:func:`websailor.eval.scoring.check_record` and :func:`websailor.eval.scoring.score_record`, step
logs by :func:`websailor.train.rl_log.read_step_log`, QA files by
:func:`websailor.synth.dataset.read_items_and_tail`; every string reaches the page escaped; paths
in URLs never leave the root (:func:`websailor.view.discover.resolve`).
"""

from websailor.view.app import create_view_app
from websailor.view.discover import RunEntry, find_runs, resolve

__all__ = ["RunEntry", "create_view_app", "find_runs", "resolve"]
