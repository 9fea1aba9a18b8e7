"""Several rollout servers behind one RL batch (websailor.train.rl.servers, the sync's server
list and folder), against HTTP imitations of vLLM's API: rollouts go to the least busy server,
every server takes each step's weights, a server of another version is refused, a server that
dies mid-batch stops the step or is dropped while its rollouts rerun elsewhere, and a sync
folder a server cannot read is one line before any rollout. Real vLLM servers:
tests/test_vllm_server.py."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakes import serving, vllm_imitation

from websailor.agent.loop import AgentConfig
from websailor.errors import ConfigError, ModelError
from websailor.judge import load_judge
from websailor.judge.gold import Gold
from websailor.models.vllm_server import VLLMServerModel
from websailor.questions import Question
from websailor.train.common import load_tokenizer
from websailor.train.rl.rollouts import AgentRollouts, RolloutSettings
from websailor.train.rl.servers import ServerPool
from websailor.train.rl.sync import ServerWeightSync, WeightSyncError

REPLY = "<think>\nThe capital of France is Paris.\n</think>\n<answer>Paris</answer>"
ITEMS = [
    Question("q1", "Which city is the capital of France?", Gold.parse("Paris")),
    Question("q2", "Which city is the capital of Italy?", Gold.parse("Rome")),
]


def _tiny_model():
    """A module with ``save_pretrained`` writing its weights as safetensors, as the sync calls it."""
    import torch

    model = torch.nn.Linear(4, 4)

    def save_pretrained(folder, state_dict, safe_serialization):
        from safetensors.torch import save_file

        Path(folder).mkdir(parents=True)
        save_file(state_dict, str(Path(folder) / "model.safetensors"))

    model.save_pretrained = save_pretrained
    return model


def _servers(stack: ExitStack, tok, n: int = 2, **kw) -> tuple[list, list[str]]:
    apps = [vllm_imitation(tok, REPLY, **(kw if i == n - 1 else {"delay_s": kw.get("delay_s", 0.0)})) for i in range(n)]
    urls = [stack.enter_context(serving(app)) for app in apps]
    return apps, [f"vllm:policy@{url}/v1" for url in urls]


def _rollouts(out: Path, model_dir: Path, specs, sync, on_server_loss="stop"):
    out.mkdir(exist_ok=True)
    models = [
        VLLMServerModel("policy", spec.split("@", 1)[1], tokenizer_dir=model_dir, backoff_s=0.01) for spec in specs
    ]
    pool = ServerPool(models, sync.servers)
    settings = RolloutSettings(4, "v2", AgentConfig(max_calls=2), concurrency=4, on_server_loss=on_server_loss)
    items = {it.question: it for it in ITEMS}
    return AgentRollouts(items, {}, load_judge("em"), settings, out / "rollouts.jsonl", server=pool, sync=sync)


def _trainer(tok, step: int = 0):
    return SimpleNamespace(state=SimpleNamespace(global_step=step), processing_class=tok)


PROMPTS = [[{"role": "user", "content": it.question}] for it in ITEMS for _ in range(4)]


def test_rollouts_go_to_the_least_busy_server_and_every_server_takes_the_weights(tmp_path, smollm2_path):
    tok = load_tokenizer(smollm2_path)
    with ExitStack() as stack:
        apps, specs = _servers(stack, tok, delay_s=0.2)
        sync = ServerWeightSync(specs, sync_dir=tmp_path / "sync")
        sync.check()
        sync.push(_tiny_model(), 0)
        # the weights were written once, into sync_dir, and both servers were told that folder
        assert [len(app.state.reloads) for app in apps] == [1, 1]
        assert apps[0].state.reloads == apps[1].state.reloads
        assert Path(apps[0].state.reloads[0]).parent == tmp_path / "sync"
        assert not Path(apps[0].state.reloads[0]).exists()  # removed once loaded
        assert [s.version for s in sync.servers] == [0, 0]
        ro = _rollouts(tmp_path, smollm2_path, specs, sync)
        batch = ro(PROMPTS, _trainer(tok))
        assert len(batch["completion_ids"]) == 8
        served = [len(app.state.requests) for app in apps]
        assert sum(served) == 8 and min(served) >= 3, served  # four in flight at a time, spread over both
        assert [ro.last[f"server/{i}/rollouts"] for i in (0, 1)] == served
        assert ro.last["servers/live"] == 2 and ro.last["server/0/sync_s"] > 0
        records = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
        roots = [s.root for s in sync.servers]
        assert sorted(r["server"] for r in records) == sorted(roots[0:1] * served[0] + roots[1:2] * served[1])
        assert all(r["policy_version"] == 0 and r["correct"] in (True, False) for r in records)
        # a server left at other weights (its sync skipped) refuses the next batch before any rollout
        sync.servers[1].version = None
        with pytest.raises(WeightSyncError, match=f"{roots[1]} holds the weights it started with, not those of step 0"):
            ro(PROMPTS, _trainer(tok))
        assert sum(len(app.state.requests) for app in apps) == 8


def test_a_server_that_dies_mid_batch_stops_the_step_or_is_dropped(tmp_path, smollm2_path):
    """Default (stop): nothing of the batch is trained and the error names the server. With
    on_server_loss continue: the failed rollouts rerun on the server left, the dead one is
    dropped, and the next sync goes to the live server only."""
    tok = load_tokenizer(smollm2_path)
    for mode in ("stop", "continue"):
        with ExitStack() as stack:
            apps, specs = _servers(stack, tok, delay_s=0.05, die_after=1)
            sync = ServerWeightSync(specs, drop_failed=mode == "continue")
            sync.check()
            sync.push(_tiny_model(), 0)
            ro = _rollouts(tmp_path / mode, smollm2_path, specs, sync, on_server_loss=mode)
            dead = sync.servers[1].root
            if mode == "stop":
                with pytest.raises(
                    ModelError, match=f"(?s)failed on the rollout server {dead}.*on_server_loss: continue"
                ):
                    ro(PROMPTS, _trainer(tok))
                assert not (tmp_path / mode / "rollouts.jsonl").exists()
                continue
            batch = ro(PROMPTS, _trainer(tok))
            assert len(batch["completion_ids"]) == 8 and ro.last["reward/ungraded"] == 0
            assert [s.lost for s in ro.server.servers] == [False, True] and sync.servers[1].lost
            assert ro.last["servers/live"] == 1
            records = [json.loads(line) for line in (tmp_path / mode / "rollouts.jsonl").read_text().splitlines()]
            # the one rollout the server finished before it died stands; every other ran on the live one
            assert Counter(r["server"] for r in records) == {sync.servers[0].root: 7, dead: 1}
            assert all(r["termination"] == "answer" for r in records)
            sync.push(_tiny_model(), 1)  # the next step's weights go to the live server alone
            assert [len(app.state.reloads) for app in apps] == [2, 1]
            assert [s.version for s in sync.servers] == [1, 0] and sync.version == 1
            sync.require_current(1)  # the dropped server does not hold the batch back
            assert dead not in {s.root for s in sync.live}


def test_a_server_whose_reload_failed_gets_no_rollout(tmp_path, smollm2_path):
    """With on_server_loss continue, a server that failed the weight sync is dropped from the
    rollouts too: none of the batch is sampled from its old weights."""
    tok = load_tokenizer(smollm2_path)
    with ExitStack() as stack:
        apps, specs = _servers(stack, tok)
        sync = ServerWeightSync(specs, drop_failed=True)
        sync.check()
        ro = _rollouts(tmp_path, smollm2_path, specs, sync, on_server_loss="continue")
        apps[1].state.dead = True
        sync.push(_tiny_model(), 0)
        assert [s.lost for s in sync.servers] == [False, True] and ro.server.live == [0]
        apps[1].state.dead = False  # it answers again, but holds old weights
        ro(PROMPTS, _trainer(tok))
        assert (len(apps[0].state.requests), len(apps[1].state.requests)) == (8, 0)


def test_a_sync_folder_a_server_cannot_read_is_one_line_before_any_rollout(tmp_path, smollm2_path):
    tok = load_tokenizer(smollm2_path)
    with ExitStack() as stack:
        apps, specs = _servers(stack, tok)
        elsewhere = ServerWeightSync(specs, sync_dir=tmp_path / "here", server_dir=str(tmp_path / "there"))
        elsewhere.check()
        with pytest.raises(
            ConfigError, match="first weight sync failed before any rollout.*FileNotFoundError.*sync_dir"
        ):
            elsewhere.probe(_tiny_model(), 0)
        assert [s.version for s in elsewhere.servers] == [None, None] and apps[0].state.reloads == []
        # the same folder under the name the servers see it by: the probe passes
        (tmp_path / "there").symlink_to(tmp_path / "here", target_is_directory=True)
        (tmp_path / "here").mkdir(exist_ok=True)
        elsewhere.probe(_tiny_model(), 0)
        assert Path(apps[1].state.reloads[0]).parent == tmp_path / "there"
        assert [s.version for s in elsewhere.servers] == [0, 0]


def test_servers_of_different_dtypes_and_bad_server_settings_are_refused(tmp_path, smollm2_path):
    from websailor.train.rl import load_settings

    tok = load_tokenizer(smollm2_path)
    with ExitStack() as stack:
        a = stack.enter_context(serving(vllm_imitation(tok, REPLY, dtype="torch.float32")))
        b = stack.enter_context(serving(vllm_imitation(tok, REPLY, dtype="torch.bfloat16")))
        sync = ServerWeightSync([f"vllm:policy@{a}/v1", f"vllm:policy@{b}/v1"])
        with pytest.raises(ConfigError, match=f"different dtypes \\({a} float32, {b} bfloat16\\)"):
            sync.check()
    one, two = "vllm:policy@http://127.0.0.1:8001/v1", "vllm:policy@http://127.0.0.1:8002/v1"
    assert load_settings(None, rollout_server=f"{one}, {two}").rollout_servers == [one, two]
    assert load_settings(None, rollout_server=[one]).rollout_servers == [one]
    # the CLI hands a list: `--rollout-server A,B` is one element holding both
    assert load_settings(None, rollout_server=[f"{one},{two}"]).rollout_servers == [one, two]
    assert load_settings(None, rollout_server="").rollout_servers == []
    for bad, says in (
        ({"rollout_server": [one, one.replace("/v1", "/v1/")]}, "names http://127.0.0.1:8001/v1 twice"),
        (  # one server under two host names
            {"rollout_server": [one, two, one.replace("127.0.0.1", "localhost")]},
            "names http://127.0.0.1:8001/v1 twice \\(also as http://localhost:8001/v1\\)",
        ),
        ({"rollout_server": one, "server_sync_dir": "/mnt/x"}, "server_sync_dir without sync_dir"),
        ({"sync_dir": "/tmp/x"}, "settings of rollout servers: set rollout_server"),
        ({"on_server_loss": "continue"}, "settings of rollout servers"),
        ({"rollout_server": one, "on_server_loss": "retry"}, "on_server_loss"),
    ):
        with pytest.raises(ConfigError, match=says):
            load_settings(None, **bad)


# -- rollouts sampled ahead (max_staleness) ------------------------------------------------
def _questions(path: Path, n: int) -> Path:
    cities = ["Paris", "Rome", "Madrid", "Berlin", "Vienna", "Lisbon"]
    rows = [{"id": f"c{i}", "question": f"Which city is capital number {i}?", "answer": cities[i]} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_rl_model(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.test_sft import _save_tiny

    return _save_tiny(tmp_path_factory.mktemp("tiny") / "llama", smollm2_path)


def _rl_on_imitation(tmp_path: Path, model_dir: Path, url: str, name: str, corpus: Path, **overrides):
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import load_settings, train_rl

    settings = load_settings(
        None,
        group_size=2,
        batch_size=4,
        max_steps=3,
        max_calls=2,
        concurrency=4,
        precision="fp32",
        rollout_server=[f"vllm:policy@{url}/v1"],
        **overrides,
    )
    # two steps an epoch: step 3 is the first of the second, its prompts known across the epoch's end
    qa = _questions(tmp_path / "qa.jsonl", 4)
    summary = train_rl(qa, f"hf:{model_dir}", tmp_path / name, settings, env=EnvSpec(corpus=corpus), progress=False)
    records = [json.loads(line) for line in (tmp_path / name / "rollouts.jsonl").read_text().splitlines()]
    return summary, records


@pytest.mark.trainer
def test_rollouts_sampled_ahead_are_one_version_stale_and_never_span_a_sync(tmp_path, tiny_rl_model, vital_dir):
    """max_staleness 1: step 1 samples on-policy, steps 2 and 3 take the batch sampled on the
    server while the step before trained (policy version one behind, the same items and rollout
    numbers as the on-policy run, step 3 the first of a new epoch), and no completion is in
    flight when the server reloads weights."""
    tok = load_tokenizer(tiny_rl_model)
    runs = {}
    for k in (0, 1):
        app = vllm_imitation(tok, REPLY, delay_s=0.1, root=str(tiny_rl_model))
        with serving(app) as url:
            summary, records = _rl_on_imitation(tmp_path, tiny_rl_model, url, f"k{k}", vital_dir, max_staleness=k)
        runs[k] = (summary, records, app)
    summary, records, app = runs[1]
    assert summary["steps"] == 3
    assert {(r["step"], r["policy_version"], r["staleness"]) for r in records} == {(1, 0, 0), (2, 0, 1), (3, 1, 1)}
    log = summary["log"]
    assert [rec["policy/staleness"] for rec in log] == [0.0, 1.0, 1.0]
    assert all(rec["async/mispredicted"] == 0 for rec in log)
    assert [rec["policy/staleness"] for rec in runs[0][0]["log"]] == [0.0, 0.0, 0.0]
    assert {(r["step"], r["policy_version"]) for r in runs[0][1]} == {(1, 0), (2, 1), (3, 2)}
    assert "async/mispredicted" not in runs[0][0]["log"][0]

    def numbers(recs: list) -> list:
        return sorted((r["step"], r["id"], r["rollout"]) for r in recs)

    assert numbers(records) == numbers(runs[0][1])
    # the sync waits for the batch in flight: no completion spans a reload
    in_flight = 0
    for what, _ in sorted(app.state.events, key=lambda e: e[1]):
        in_flight += {"start": 1, "end": -1}.get(what, 0)
        assert what != "reload" or in_flight == 0
    reloads = [t for what, t in app.state.events if what == "reload"]
    starts = [t for what, t in app.state.events if what == "start"]
    # completions after each reload (the probe, then steps 1 to 3's weights): step 2's batch
    # was sampled on step 1's weights (after step 1's own), step 3's on step 2's, none after
    # step 3's (the last step samples nothing ahead); on-policy it is [0, 4, 4, 4]
    between = [sum(a < t < b for t in starts) for a, b in zip(reloads, [*reloads[1:], float("inf")])]
    assert between == [0, 8, 4, 0], between


def test_sampling_ahead_needs_a_rollout_server(tmp_path, tiny_rl_model, vital_dir):
    """max_staleness without a server (the local engine samples from the weights being trained)
    and below 0 are one line each before any rollout."""
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import load_settings, train_rl

    qa = _questions(tmp_path / "qa.jsonl", 2)
    settings = load_settings(None, group_size=2, batch_size=4, max_steps=1, max_staleness=1)
    with pytest.raises(ConfigError, match="max_staleness 1 samples the next batch on rollout servers"):
        train_rl(qa, f"hf:{tiny_rl_model}", tmp_path / "out", settings, env=EnvSpec(corpus=vital_dir), progress=False)
    assert not (tmp_path / "out" / "rollouts.jsonl").exists()
    with pytest.raises(ConfigError, match="max_staleness: Input should be greater than or equal to 0"):
        load_settings(None, max_staleness=-1)
    config = tmp_path / "async.yaml"
    config.write_text("async: {max_staleness: 2}\n")
    assert load_settings(config).max_staleness == 2
    assert load_settings(config, max_staleness=0).max_staleness == 0  # an option overrides the file's section


def test_a_sync_folder_the_trainer_cannot_write_is_refused_before_anything_loads(tmp_path, tiny_rl_model, vital_dir):
    """A sync_dir that is a file, or lies under one, is one line before a server is asked or
    the model loads (no server listens at the spec's URL: the check comes first)."""
    from websailor.tools.environment import EnvSpec
    from websailor.train.rl import load_settings, train_rl

    qa = _questions(tmp_path / "qa.jsonl", 2)
    (tmp_path / "file").write_text("x")
    for sync_dir, says in ((tmp_path / "file", "is a file, not a folder"), (tmp_path / "file" / "sub", "cannot write")):
        settings = load_settings(
            None,
            group_size=2,
            batch_size=4,
            max_steps=1,
            rollout_server="vllm:p@http://127.0.0.1:9/v1",
            sync_dir=str(sync_dir),
        )
        with pytest.raises(ConfigError, match=f"sync_dir {sync_dir}.*{says}"):
            train_rl(
                qa, f"hf:{tiny_rl_model}", tmp_path / "out", settings, env=EnvSpec(corpus=vital_dir), progress=False
            )
        assert not (tmp_path / "out").exists()
    made = tmp_path / "new" / "sync"  # a missing folder is made
    settings = load_settings(
        None, group_size=2, batch_size=4, max_steps=1, rollout_server="vllm:p@http://127.0.0.1:9/v1", sync_dir=str(made)
    )
    with pytest.raises(ConfigError, match="rollout server vllm:p@http://127.0.0.1:9/v1"):
        train_rl(qa, f"hf:{tiny_rl_model}", tmp_path / "out2", settings, env=EnvSpec(corpus=vital_dir), progress=False)
    assert made.is_dir() and not list(made.iterdir())


# -- the NCCL weight transfer (its HTTP and NCCL side stand in a recording client here) ------
class _RecordingTransfer:
    """Stands in for TRL's WeightTransferClient: records the calls and what was sent."""

    def __init__(self, calls: list, root: str, info: dict, fail_send: bool = False):
        self.calls, self.root, self.info, self.fail_send = calls, root, info, fail_send

    def init_weight_transfer(self):
        self.calls.append((self.root, "init"))

    def pause(self):
        self.calls.append((self.root, "pause"))

    def send_weights(self, iterator):
        sent = [(name, tuple(t.shape)) for name, t in iterator]
        self.calls.append((self.root, "send", len(sent)))
        if self.fail_send:
            raise RuntimeError("NCCL error: unhandled system error")

    def resume(self):
        self.calls.append((self.root, "resume"))


def test_the_nccl_sync_opens_a_group_once_and_pauses_around_each_transfer(tmp_path, smollm2_path):
    from websailor.train.rl.nccl_sync import NCCLWeightSync

    tok = load_tokenizer(smollm2_path)
    calls: list = []
    infos: list = []

    def factory(root, info, timeout_s):
        infos.append(info)
        return _RecordingTransfer(calls, root, info)

    model = _tiny_model()
    with ExitStack() as stack:
        url = stack.enter_context(serving(vllm_imitation(tok, REPLY, weight_transfer=True)))
        sync = NCCLWeightSync([f"vllm:policy@{url}/v1"], client_factory=factory)
        sync.check()
        sync.probe(model, 0)
        sync.push(model, 1)
        root = sync.servers[0].root
        ops = [c[1] for c in calls]
        assert ops == ["init", "pause", "send", "resume", "pause", "send", "resume"]  # one group, two transfers
        assert [c[2] for c in calls if c[1] == "send"] == [2, 2]  # the Linear's weight and bias
        assert infos == [{"names": ["weight", "bias"], "dtype_names": ["float32"] * 2, "shapes": [[4, 4], [4]]}]
        assert sync.version == 1 and sync.servers[0].version == 1 and sync.last_write_s == 0.0
        assert not list(tmp_path.iterdir())  # nothing written anywhere
        # a server without the weight-transfer endpoints is one line at the check
        plain = stack.enter_context(serving(vllm_imitation(tok, REPLY)))
        with pytest.raises(ConfigError, match=r"no /init_weight_transfer_engine, /pause, .* --weight-transfer-config"):
            NCCLWeightSync([f"vllm:policy@{plain}/v1"], client_factory=factory).check()
        # a transfer that fails: the step's error names the server, the probe's says what to check
        failing = NCCLWeightSync(
            [f"vllm:policy@{url}/v1"], client_factory=lambda r, i, t: _RecordingTransfer(calls, r, i, fail_send=True)
        )
        with pytest.raises(ConfigError, match=f"NCCL weight sync to {root} before the probe: RuntimeError: NCCL"):
            failing.probe(model, None)
        assert calls[-1] == (root, "resume")  # the server is resumed even when the transfer failed
        with pytest.raises(WeightSyncError, match=f"NCCL weight sync to {root} before step 3"):
            failing.push(model, 2)


def test_nccl_settings_are_checked():
    from websailor.train.rl import load_settings

    with pytest.raises(ConfigError, match="sync_dir with weight_transfer nccl"):
        load_settings(None, rollout_server=["vllm:p@http://127.0.0.1:1/v1"], weight_transfer="nccl", sync_dir="/tmp")
    with pytest.raises(ConfigError, match="weight_transfer nccl is a setting of rollout servers"):
        load_settings(None, weight_transfer="nccl")
