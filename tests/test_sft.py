"""Cold-start SFT: data checks, the assistant-only loss mask as TRL sees it, training a tiny
model end to end (resume, LoRA merge, use as ``hf:DIR``), and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures import ChatMLSample

from websailor.errors import ConfigError, InputFormatError
from websailor.train.sft import SFTSettings, load_settings, load_tokenizer, train_sft
from websailor.train.sft_data import load_sft_data


def _save_tiny(out: Path, tokenizer_from: Path | None, model_type: str = "llama", hidden_size: int = 32) -> Path:
    """A randomly initialised tiny model of ``model_type`` with SmolLM2's tokenizer (or none);
    a llama has two heads of ``hidden_size / 2`` (64 for vLLM's CPU attention, whose smallest
    head is 32)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kw = dict(vocab_size=49152, hidden_size=hidden_size, num_hidden_layers=2, max_position_embeddings=8192)
    if model_type == "llama":
        kw.update(
            num_attention_heads=2, num_key_value_heads=1, intermediate_size=2 * hidden_size, tie_word_embeddings=True
        )
    cfg = AutoConfig.for_model(model_type, **kw)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    if tokenizer_from is not None:
        AutoTokenizer.from_pretrained(tokenizer_from).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_tiny(tmp_path_factory.mktemp("tiny") / "llama", smollm2_path)


def _import_first(chatml: Path, out: Path, n: int = 6) -> Path:
    """The first ``n`` trajectories of a ChatML file, imported into our format at ``out``."""
    from websailor.train.importer import read_chatml

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in read_chatml(chatml)[:n]))
    return out


@pytest.fixture(scope="module")
def chatml_trajs(generated_chatml: ChatMLSample, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 6 generated WebDancer-layout trajectories (real tool observations over the
    vital corpus), imported into our format: what the training runs train on."""
    return _import_first(generated_chatml.path, tmp_path_factory.mktemp("data") / "sft.jsonl")


@pytest.fixture(scope="module")
def sample_trajs(chatml_sample: ChatMLSample, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 6 trajectories of the generated file and, when present, of the real WebDancer
    sample, imported into our format: the data checks run on both."""
    return _import_first(chatml_sample.path, tmp_path_factory.mktemp("data") / "sft.jsonl")


def test_labels_cover_exactly_the_assistant_turns(tiny: Path, sample_trajs: Path):
    """Decode the labels TRL trains on: they are the assistant replies (and their end-of-turn
    token), in order, and nothing of the system prompt, question or tool responses."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    tok = load_tokenizer(tiny)
    data = load_sft_data(sample_trajs, tok, max_length=8192)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny),
        args=SFTConfig(output_dir=str(sample_trajs.parent / "ck"), report_to="none", use_cpu=True, max_length=None),
        train_dataset=Dataset.from_list(data.examples),
        processing_class=tok,
    )
    first = json.loads(sample_trajs.read_text().splitlines()[0])
    row = trainer.train_dataset[0]
    ids, labels = row["input_ids"], row["labels"]
    spans, cur = [], []
    for i, lab in zip(ids, labels):
        if lab != -100:
            assert lab == i
            cur.append(i)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    decoded = [tok.decode(s) for s in spans]
    assistant = [m["content"] for m in first["messages"] if m["role"] == "assistant"]
    assert decoded == [a + tok.eos_token for a in assistant]
    everything = "".join(decoded)
    assert "<tool_response>" not in everything and first["question"] not in everything
    assert first["messages"][0]["content"][:80] not in everything
    # the context is all there: the tool responses are in the inputs, only out of the loss
    assert "<tool_response>" in tok.decode(ids)


def test_too_long_trajectories_are_dropped_and_counted_never_cut(tiny: Path, sample_trajs: Path):
    from websailor.agent.trajectory import Trajectory

    tok = load_tokenizer(tiny)
    lengths = [
        len(Trajectory.from_dict(json.loads(line)).token_view(tok)[0]) for line in sample_trajs.read_text().splitlines()
    ]
    limit = sorted(lengths)[2]  # three fit, three do not
    data = load_sft_data(sample_trajs, tok, max_length=limit)
    assert {k: data.counts[k] for k in ("read", "kept", "too_long", "unfinished")} == {
        "read": 6,
        "kept": 3,
        "too_long": 3,
        "unfinished": 0,
    }
    assert 0 <= data.counts["visits_grounded"] <= data.counts["visits"]  # of the kept ones (traj stats)
    assert sorted(len(e["input_ids"]) for e in data.examples) == sorted(n for n in lengths if n <= limit)
    for e in data.examples:  # whole: each ends with the answer's end-of-turn token (then only the template's newline)
        last = max(i for i, m in enumerate(e["assistant_masks"]) if m)
        assert e["input_ids"][last] == tok.eos_token_id and not tok.decode(e["input_ids"][last + 1 :]).strip()


def test_bad_trajectory_files(tiny: Path, sample_trajs: Path, tmp_path: Path):
    tok = load_tokenizer(tiny)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputFormatError, match="holds no trajectories"):
        load_sft_data(empty, tok, 4096)
    with pytest.raises(InputFormatError, match="no such file"):
        load_sft_data(tmp_path / "missing.jsonl", tok, 4096)
    rec = json.loads(sample_trajs.read_text().splitlines()[0])
    swapped = dict(rec, messages=rec["messages"][:2] + [rec["messages"][3], rec["messages"][2]] + rec["messages"][4:])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rec) + "\n" + json.dumps(swapped) + "\n")
    with pytest.raises(InputFormatError, match=r"line 2 .*message 3 is 'user' where 'assistant' was due"):
        load_sft_data(bad, tok, 8192)
    bad.write_text(json.dumps(dict(rec, messages=rec["messages"][:-1])) + "\n")
    with pytest.raises(InputFormatError, match="last message is 'user'"):
        load_sft_data(bad, tok, 8192)
    bad.write_text(json.dumps(dict(rec, termination="max_calls")) + "\n")
    with pytest.raises(InputFormatError, match="no trajectory left to train on.*unfinished"):
        load_sft_data(bad, tok, 8192)


@pytest.mark.trainer
def test_train_resume_and_use_as_model(tiny: Path, chatml_trajs: Path, tmp_path: Path):
    from websailor.agent import Agent, AgentConfig
    from websailor.models import load_model

    out = tmp_path / "sft"
    settings = SFTSettings(max_steps=2, batch_size=2, learning_rate=1e-3, max_length=8192, save_steps=1)
    s = train_sft(chatml_trajs, f"hf:{tiny}", out, settings, progress=False, report_to="tensorboard")
    assert s["steps"] == 2 and s["gradient_accumulation"] == 2 and s["counts"]["kept"] == 6
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))  # --report-to reaches TRL's trainer
    assert len(s["loss_history"]) == 2 and all(h["loss"] > 0 for h in s["loss_history"])
    # warm-up then cosine decay from the peak
    assert s["loss_history"][0]["learning_rate"] < s["loss_history"][1]["learning_rate"] <= 1e-3
    assert (out / "sft_summary.json").is_file() and list(out.glob("checkpoints/checkpoint-*"))
    # the same command again finds the finished run; other settings are refused, not mixed
    assert train_sft(chatml_trajs, f"hf:{tiny}", out, settings, progress=False)["train_seconds"] == s["train_seconds"]
    with pytest.raises(ConfigError, match="other learning_rate"):
        train_sft(chatml_trajs, f"hf:{tiny}", out, settings.model_copy(update={"learning_rate": 2e-3}), progress=False)
    # the directory is a model for the agent
    model = load_model(f"hf:{out}")
    traj = Agent(model, [], AgentConfig(max_calls=1, max_tokens_per_turn=8)).run("Who painted the Mona Lisa?")
    assert traj.num_model_calls == 1 and traj.model == f"hf:{out}"


def test_report_to_names_unknown_and_missing_trackers(monkeypatch):
    import importlib.util

    from websailor.train.common import check_report_to

    assert check_report_to(None) == [] and check_report_to("none") == [] and check_report_to([]) == []
    assert check_report_to(["tensorboard,tensorboard"]) == ["tensorboard"]
    with pytest.raises(ConfigError, match="none together with wandb: choose one"):
        check_report_to("none,wandb")
    with pytest.raises(ConfigError, match="'comet': not one of tensorboard, wandb, mlflow, trackio"):
        check_report_to("tensorboard,comet")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="needs the wandb package: pip install wandb"):
        check_report_to(["wandb"])


@pytest.mark.trainer
def test_resume_from_a_checkpoint(tiny: Path, chatml_trajs: Path, tmp_path: Path):
    out = tmp_path / "sft"
    settings = SFTSettings(max_steps=3, batch_size=1, learning_rate=1e-3, max_length=8192, save_steps=1)
    train_sft(chatml_trajs, f"hf:{tiny}", out, settings, progress=False)
    # simulate a run killed while saving checkpoint 3: no final model, and that checkpoint without its state file
    (out / "sft_summary.json").unlink()
    for f in ("model.safetensors", "config.json"):
        (out / f).unlink()
    last = max(out.glob("checkpoints/checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert last.name == "checkpoint-3"
    (last / "trainer_state.json").unlink()
    s = train_sft(chatml_trajs, f"hf:{tiny}", out, settings, progress=False)  # resumes from checkpoint 2
    assert s["steps"] == 3 and [h["step"] for h in s["loss_history"]] == [1, 2, 3]
    assert (out / "model.safetensors").is_file() and (
        out / "checkpoints" / "checkpoint-3" / "trainer_state.json"
    ).is_file()


@pytest.mark.trainer
def test_lora_is_merged_into_a_plain_model(tiny: Path, chatml_trajs: Path, tmp_path: Path):
    from safetensors import safe_open

    out = tmp_path / "lora"
    s = train_sft(
        chatml_trajs,
        f"hf:{tiny}",
        out,
        SFTSettings(max_steps=1, batch_size=1, lora=True, warmup_ratio=0, learning_rate=1e-3, max_length=8192),
        progress=False,
    )
    assert s["steps"] == 1
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert keys and not any("lora" in k for k in keys)
    assert not (out / "adapter_config.json").exists() and (out / "adapter" / "adapter_config.json").exists()
    name = next(k for k in keys if k.endswith("self_attn.q_proj.weight"))
    with safe_open(str(out / "model.safetensors"), "pt") as f, safe_open(str(tiny / "model.safetensors"), "pt") as g:
        assert not f.get_tensor(name).equal(g.get_tensor(name))  # the trained adapter is merged in


def test_bad_models_and_settings(smollm2_path: Path, chatml_trajs: Path, tmp_path: Path):
    no_tok = _save_tiny(tmp_path / "notok", None)
    with pytest.raises(ConfigError, match="has no tokenizer"):
        train_sft(chatml_trajs, f"hf:{no_tok}", tmp_path / "o1", SFTSettings(max_steps=1), progress=False)
    with pytest.raises(ConfigError, match="not a transformers model directory"):
        train_sft(chatml_trajs, f"hf:{tmp_path}", tmp_path / "o2", SFTSettings(max_steps=1), progress=False)
    with pytest.raises(ConfigError, match="needs local weights"):
        train_sft(chatml_trajs, "openai:m@http://localhost:1/v1", tmp_path / "o3", progress=False)
    mamba = _save_tiny(tmp_path / "mamba", smollm2_path, "mamba")
    with pytest.raises(ConfigError, match="--lora: PEFT cannot wrap model type 'mamba'"):
        train_sft(
            chatml_trajs,
            f"hf:{mamba}",
            tmp_path / "o4",
            SFTSettings(max_steps=1, lora=True, max_length=8192, warmup_ratio=0),
            progress=False,
        )
    assert not (tmp_path / "o4").exists()  # a run refused before training leaves nothing that blocks the next
    with pytest.raises(ConfigError, match="all 1 steps of this run are warm-up"):  # a step at lr 0 changes nothing
        train_sft(
            chatml_trajs,
            f"hf:{smollm2_path}",
            tmp_path / "o5",
            SFTSettings(max_steps=1, max_length=8192),
            progress=False,
        )
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("learning_rate: 2e-5\nbatch_size: 64\n")
    s = load_settings(cfg, batch_size=8)
    assert (s.learning_rate, s.batch_size, s.weight_decay, s.lr_scheduler) == (2e-5, 8, 0.1, "cosine")
    cfg.write_text("learning_rate: fast\nepochz: 2\n")
    with pytest.raises(ConfigError, match="learning_rate: .*; epochz: Extra inputs are not permitted"):
        load_settings(cfg)
    for text, message in [
        ("a: [1, 2\n", "not valid YAML"),
        ("1: 2\n", "expected a mapping"),
        ("learning_rate: .inf\n", "learning_rate: Input should be a finite number"),
        ("batch_size: 2\nmicro_batch_size: 64\n", "micro_batch_size \\(64\\) is larger than batch_size"),
        ("seed: -1\n", "seed: Input should be greater than or equal to 0"),
    ]:
        cfg.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_settings(cfg)
    cfg.write_bytes(bytes(range(128, 256)))
    with pytest.raises(ConfigError, match="not a text file"):
        load_settings(cfg)
    with pytest.raises(ConfigError, match="not empty and holds no SFT run"):
        (tmp_path / "busy").mkdir()
        (tmp_path / "busy" / "x").write_text("")
        train_sft(chatml_trajs, f"hf:{smollm2_path}", tmp_path / "busy", SFTSettings(max_steps=1), progress=False)


def test_shipped_configs_are_valid():
    import yaml

    root = Path(__file__).resolve().parents[1] / "configs"
    paper = load_settings(root / "sft" / "paper.yaml")
    assert paper == SFTSettings()  # the defaults are the paper's, gradient checkpointing included
    assert (paper.learning_rate, paper.weight_decay, paper.lr_scheduler, paper.batch_size) == (5e-6, 0.1, "cosine", 32)
    mini = load_settings(root / "sft" / "cpu_mini.yaml")
    assert mini.max_steps == 80 and mini.lora is False and mini.gradient_checkpointing is True
    zero3 = yaml.safe_load((root / "accelerate" / "zero3.yaml").read_text())
    assert zero3["distributed_type"] == "DEEPSPEED" and zero3["deepspeed_config"]["zero_stage"] == 3
    assert zero3["deepspeed_config"]["zero3_save_16bit_model"] is True  # OUT stays a plain model directory
    assert yaml.safe_load((root / "accelerate" / "ddp.yaml").read_text())["distributed_type"] == "MULTI_GPU"


@pytest.mark.parametrize("template", ["qwen3", "llama3"])
def test_mask_follows_templates_that_reformat_replies(smollm2_path: Path, sample_trajs: Path, template: str):
    """Qwen3 renders '</think>' followed by a blank line, Llama 3 trims replies: the loss still
    covers each rendered reply through its end-of-turn marker, and nothing of the next turn."""
    import trl
    from transformers import AutoTokenizer

    from websailor.agent.trajectory import Trajectory

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / f"{template}.jinja").read_text()
    end = {"qwen3": "<|im_end|>", "llama3": "<|eot_id|>"}[template]
    traj = Trajectory.from_dict(json.loads(sample_trajs.read_text().splitlines()[0]))
    traj.messages[2]["content"] += "   "  # trailing spaces a trimming template drops
    ids, mask = traj.token_view(tok)
    spans, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            spans.append(tok.decode(cur))
            cur = []
    if cur:
        spans.append(tok.decode(cur))
    assistant = [m["content"] for m in traj.messages if m["role"] == "assistant"]
    assert len(spans) == len(assistant)
    for span, content in zip(spans, assistant):
        # SmolLM2's vocabulary has no '<|eot_id|>' token: its last '>' may merge with the next header's '<'
        assert span.endswith(end) or (template == "llama3" and span.endswith(end[:-1]))
        assert "<tool_response>" not in span and "user" not in span[-30:]
        tail = content.strip().split("</think>")[-1].strip()[-40:]  # the action part, as the model wrote it
        assert tail in span


def test_cpu_training_memory_limits_are_set_and_recorded():
    """On CPU, TRL's fused LM head gets the smaller tiles and the run summary says so."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trl_utils

    from websailor.train.common import CPU_LM_HEAD_TILE, limit_training_memory, memory_record

    done = limit_training_memory()
    assert (kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == CPU_LM_HEAD_TILE
    rec = memory_record(SFTSettings(), done)
    assert rec["gradient_checkpointing"] is True
    assert rec["checkpointing_kwargs"] == {"use_reentrant": False, "kept": "attention outputs"}
    assert rec["lm_head_tile"] == [1024, 8192] and rec["mmap_threshold"] in (1 << 20, None)  # None off glibc
    assert memory_record(SFTSettings(gradient_checkpointing=False))["checkpointing_kwargs"] is None


def test_memory_limits_off_restores_trls_tiles(monkeypatch: pytest.MonkeyPatch):
    """``memory_limits: false`` puts TRL's own LM-head tiles back after a run that cut them."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trl_utils

    from websailor.train import common

    monkeypatch.setattr(kernel, "TOKEN_CHUNK_SIZE", 4096)
    monkeypatch.setattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", 32768)
    monkeypatch.setattr(common, "_TRL_TILES", None)
    assert common.limit_training_memory(True)["lm_head_tile"] == [1024, 8192]
    assert (kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == common.CPU_LM_HEAD_TILE
    off = common.limit_training_memory(False)
    assert off == {"lm_head_tile": None, "mmap_threshold": None}
    assert (kernel.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == (4096, 32768)
