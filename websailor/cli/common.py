"""What every command shares: the error model (one line on stderr, exit status 2), option types,
the environment options (one :class:`~websailor.tools.environment.EnvSpec` per command) and
the end-of-run tool metrics table."""

from __future__ import annotations

import inspect
import json
import math
import os
import shlex
import sys
from collections.abc import Callable
from enum import Enum
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional

import typer

from websailor.errors import EXIT_SERVICE_DOWN, ServiceDown, WebsailorError
from websailor.log import get_logger
from websailor.packed import named_sources
from websailor.text import clean_strings

logger = get_logger("websailor.cli")


class Env(str, Enum):
    local = "local"
    web = "web"
    none = "none"


class Observations(str, Enum):
    paper = "paper"
    compact = "compact"


class Split(str, Enum):
    train = "train"
    test = "test"
    all = "all"


class Task(str, Enum):
    qa = "qa"
    report = "report"


TaskOpt = Annotated[Task, typer.Option(help="qa: short answers; report: cited Markdown reports (docs/reports.md).")]
SummarizeAtOpt = Annotated[
    Optional[float],
    typer.Option(
        min=0,
        max=0.85,
        help="Share of the context from which earlier turns are replaced by a summary the model writes "
        "(ReSum); 0: never. Default: 0.7 on report tasks, never on QA.",
    ),
]


CorpusOpt = Annotated[
    Optional[Path],
    typer.Option("--corpus", help="Corpus directory (default: the embedded corpus in $WEBSAILOR_HOME)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
# agent options of the commands that run the agent
ModelOpt = Annotated[str, typer.Option(help="smollm2, hf:PATH, openai:MODEL@BASE_URL or vllm:NAME@BASE_URL.")]
MaxCallsOpt = Annotated[int, typer.Option(min=1, help="Model calls per question.")]


class Engine(str, Enum):
    """Which engine samples a local model's rollouts (:mod:`websailor.models.serving`)."""

    auto = "auto"
    local = "local"
    vllm = "vllm"


#: the environment variable that sets ``--engine``'s default (a cluster's job script, the test suite)
ENGINE_ENV = "WEBSAILOR_ENGINE"

EngineOpt = Annotated[
    Engine,
    typer.Option(
        envvar=ENGINE_ENV,
        help="Which engine samples a local model (smollm2, hf:DIR): auto starts a vLLM server for the job when "
        "its rollouts reach the break-even of the server's start-up (about 15 rollouts on two cores) and vLLM is installed "
        "(make vllm), and stops it at the end; local never does; vllm always does.",
    ),
]
MaxEnvFailuresOpt = Annotated[
    int,
    typer.Option(
        min=0,
        help="Tool calls per rollout the environment may degrade (provider outage, tool server down) with the "
        "rollout still graded; beyond it the rollout is ungraded (eval and run rerun it). Default 0: a single "
        "degraded call leaves it ungraded.",
    ),
]
MaxTokensOpt = Annotated[
    Optional[int],
    typer.Option(min=1, help="Completion tokens per model call (default: the model's, 256 for smollm2; paper: 8192)."),
]
TimeoutOpt = Annotated[
    Optional[float],
    typer.Option(min=1, help="Wall-clock seconds per question (default: the model's, 1800 local; paper: 9000)."),
]
TemperatureOpt = Annotated[float, typer.Option(min=0, help="Sampling temperature.")]
TopPOpt = Annotated[
    float,
    typer.Option(min=0, max=1, help="Top-p, above 0: sample from the likeliest tokens whose mass reaches P (1: all)."),
]
PresencePenaltyOpt = Annotated[
    float,
    typer.Option(
        min=-2,
        max=2,
        help="Presence penalty (-2 to 2; applied by vLLM and HTTP backends, not by the local transformers ones).",
    ),
]
SeedOpt = Annotated[int, typer.Option(help="Sampling seed (with the question id and rollout index).")]


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with status 2 (a packed run file's copy in
    the cache named by the packed file, :func:`websailor.packed.named_sources`)."""
    print(f"error: {named_sources(message)}", file=sys.stderr)
    raise typer.Exit(2)


def check_output_path(path: Path, option: str = "--out") -> None:
    """Refuse an output path that cannot be created because one of its folders is a file, so
    that the mistake is told before the tools and the model are started."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                fail(f"{option} {path}: {parent} is a file, not a folder")
            return


def print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2))


def check_finite(**values: float | None) -> None:
    """Refuse ``nan`` and ``inf`` for the named options (typer's ``min`` lets them through)."""
    bad = [name for name, v in values.items() if v is not None and not math.isfinite(v)]
    if bad:
        names = " and ".join("--" + b.replace("_", "-") for b in bad)
        fail(f"{names} must be {'a finite number' if len(bad) == 1 else 'finite numbers'}")


def resume_command() -> str:
    """The command line this process was started with, as ``websailor ...`` (rerunning it
    resumes every command that writes as it goes)."""
    return shlex.join(["websailor", *sys.argv[1:]])


def handle_errors(fn: Callable) -> Callable:
    """Turn websailor's own errors into a one-line message and exit status 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # undecodable command-line bytes arrive as lone surrogates: make them printable
        kwargs = {k: clean_strings(v) for k, v in kwargs.items()}
        try:
            return fn(*args, **kwargs)
        except ServiceDown as e:
            # what finished is on disk (the runners write as they go); the console script
            # exits at once on this status (websailor.cli.main.main)
            print(
                f"error: {e}; what finished is kept; once it answers, resume with: {resume_command()}", file=sys.stderr
            )
            raise typer.Exit(EXIT_SERVICE_DOWN) from None
        except WebsailorError as e:
            fail(str(e))
        except BrokenPipeError:  # `websailor search ... | head`: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except OSError as e:  # permissions, full disk: name the file and the reason
            if e.filename:
                fail(f"{e.filename}: {e.strerror}")
            fail(f"{e.strerror or e} (while writing an output file: is the disk full?)" if e.errno == 28 else str(e))
        except KeyboardInterrupt:
            # clean-up (temporary build directories) has run in the finally blocks and every
            # finished trajectory is on disk; exit now rather than wait for calls in flight
            print("interrupted: what finished is saved; rerun the same command to resume", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)

    return wrapper


# -- the environment options --------------------------------------------------------------------
def _option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


#: The environment options, in the order ``--help`` lists them; each maps onto the
#: :class:`~websailor.tools.environment.EnvSpec` field of the same name (``env`` is ``kind``).
ENV_OPTIONS = {
    "env": _option(
        "env",
        Annotated[
            Env,
            typer.Option(
                "--env",
                help="Environment of the tools: local (offline Wikipedia), web (real search and pages) "
                "or none (no tools: direct answers).",
                rich_help_panel="Environment",
            ),
        ],
        Env.local,
    ),
    "corpus": _option(
        "corpus",
        Annotated[
            Optional[Path],
            typer.Option(
                "--corpus",
                help="Corpus directory of the local environment (default: the embedded corpus in $WEBSAILOR_HOME).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "tools_url": _option(
        "tools_url",
        Annotated[
            Optional[str],
            typer.Option(
                "--tools-url",
                help="Use the tools of a `websailor serve tools` server at this URL (shared index and cache) "
                "instead of --env.",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "web_config": _option(
        "web_config",
        Annotated[
            Optional[Path],
            typer.Option(
                "--web-config",
                help="YAML/JSON web settings (keys, base URLs, per-tool limits); default $WEBSAILOR_WEB_CONFIG. "
                "Environment variables (SERPER_API_KEY, SEARXNG_BASE_URL, JINA_API_KEY, ...) override it.",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "tools": _option(
        "tools",
        Annotated[
            Optional[str],
            typer.Option(
                "--tools",
                help="Comma-separated tools to offer (default: the environment's; local also has "
                "PythonInterpreter and parse_file on request).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "files_dir": _option(
        "files_dir",
        Annotated[
            Optional[Path],
            typer.Option(
                "--files-dir",
                help="Folder parse_file may read local files from (when parse_file is among the tools).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "unsafe_python": _option(
        "unsafe_python",
        Annotated[
            bool,
            typer.Option(
                "--unsafe-python",
                help="Run PythonInterpreter without isolation where bubblewrap cannot run (unsafe).",
                rich_help_panel="Environment",
            ),
        ],
        False,
    ),
    "summary_model": _option(
        "summary_model",
        Annotated[
            Optional[str],
            typer.Option(
                "--summary-model",
                help="Model spec of visit's LLM page extractor (default: the goal-ranked passage extractor).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "observations": _option(
        "observations",
        Annotated[
            Optional[Observations],
            typer.Option(
                "--observations",
                help="Observation preset: paper (10 results, 300-character snippets, 4,000 characters of evidence "
                "per page) or compact (5, 160, 800: a small model on CPU); the three options below override it.",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "search_results": _option(
        "search_results",
        Annotated[
            Optional[int],
            typer.Option(
                "--search-results",
                help="Results per search query (default: the paper's 10).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "snippet_chars": _option(
        "snippet_chars",
        Annotated[
            Optional[int],
            typer.Option(
                "--snippet-chars",
                help="Longest snippet of a search result in characters (default: 300 local; the provider's on the web).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
    "evidence_chars": _option(
        "evidence_chars",
        Annotated[
            Optional[int],
            typer.Option(
                "--evidence-chars",
                help="Evidence budget of one visited page in characters (default: 4,000).",
                rich_help_panel="Environment",
            ),
        ],
        None,
    ),
}

#: The observation options: the ones ``traj build --source constructive`` uses too.
OBSERVATION_OPTIONS = ("observations", "search_results", "snippet_chars", "evidence_chars")


def env_options(exclude: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Give a command every environment option (:data:`ENV_OPTIONS`, less ``exclude``) and
    pass them to it as one ``env_spec`` argument, an
    :class:`~websailor.tools.environment.EnvSpec` (a bad value exits with one line naming the
    option). The command declares ``env_spec`` as its last parameter."""
    unknown = set(exclude) - set(ENV_OPTIONS)
    if unknown:
        raise ValueError(f"env_options: no environment option {sorted(unknown)}")
    added = [p for name, p in ENV_OPTIONS.items() if name not in exclude]

    def decorate(fn: Callable) -> Callable:
        own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "env_spec"]

        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from websailor.tools.environment import EnvSpec

            values = {p.name: kwargs.pop(p.name) for p in added}
            kind = values.pop("env", Env.local)
            kwargs["env_spec"] = EnvSpec.from_options(kind=kind.value, **values)
            return fn(*args, **kwargs)

        wrapper.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "env_spec"}
        return wrapper

    return decorate


#: The service options (:func:`service_options`).
SERVICE_OPTIONS = {
    "service_failures": _option(
        "service_failures",
        Annotated[
            Optional[int],
            typer.Option(
                help="Failed requests in a row (transport failures, timeouts, HTTP 5xx) over at least 10 s that "
                "declare a service down: the model server, the judge or the tool server. The run then stops, keeps "
                "what finished and exits 4; rerunning the same command resumes. Default 5 (or "
                "WEBSAILOR_SERVICE_FAILURES).",
                rich_help_panel="Services",
            ),
        ],
        None,
    ),
    "judge_timeout": _option(
        "judge_timeout",
        Annotated[
            Optional[float],
            typer.Option(
                help="Seconds one judge request may take, its HTTP retries included (a verdict or RACE reply is "
                "asked up to 3 times; default: 120 a verdict, 600 a RACE reply, for reasoning judges). A "
                "non-reasoning judge answers in seconds: a lower value finds a hanging one sooner.",
                rich_help_panel="Services",
            ),
        ],
        None,
    ),
    "judge_max_tokens": _option(
        "judge_max_tokens",
        Annotated[
            Optional[int],
            typer.Option(
                help="Completion tokens of one judge request, at least 16 (default: 4,096 a verdict, 16,384 a RACE "
                "reply, what "
                "a reasoning judge thinks in); a non-reasoning judge's verdict needs a few hundred, its RACE reply a "
                "few thousand (a reply cut at the limit is asked again, never scored).",
                rich_help_panel="Services",
            ),
        ],
        None,
    ),
}


def service_options(judge: bool = True) -> Callable[[Callable], Callable]:
    """Give a command ``--service-failures`` (and, with ``judge``, ``--judge-timeout`` and
    ``--judge-max-tokens``) and apply them before it runs
    (:func:`websailor.breaker.set_threshold`, :func:`websailor.judge.load.set_judge_limits`); a
    bad value exits with one line before any work. Goes under :func:`handle_errors`."""
    added = [p for name, p in SERVICE_OPTIONS.items() if judge or not name.startswith("judge_")]

    def decorate(fn: Callable) -> Callable:
        own = list(inspect.signature(fn, eval_str=True).parameters.values())

        @wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from websailor.breaker import set_threshold
            from websailor.judge.load import set_judge_limits

            values = {p.name: kwargs.pop(p.name) for p in added}
            given = [f"--{n.replace('_', '-')}" for n in ("judge_timeout", "judge_max_tokens") if values.get(n)]
            spec = kwargs.get("judge", kwargs.get("reward"))
            if given and isinstance(spec, str) and not spec.strip().startswith("llm:"):
                logger.warning(
                    "%s apply to an llm: judge; the %s judge has no model: ignored", " and ".join(given), spec
                )
            set_threshold(values["service_failures"])
            set_judge_limits(values.get("judge_timeout"), values.get("judge_max_tokens"))
            return fn(*args, **kwargs)

        # the options go before the environment's (typer lists them in signature order)
        wrapper.__signature__ = inspect.Signature([*own, *added])  # type: ignore[attr-defined]
        wrapper.__annotations__ = dict(fn.__annotations__)
        return wrapper

    return decorate


def warn_unused_env(env_spec: Any, why: str) -> None:
    """One warning line naming the environment options given to a command that will not use
    them this time (``synth`` without ``--filter-with``, ``traj build`` without ``--source
    expert``)."""
    given = env_spec.given()
    if given:
        verb = "is" if len(given) == 1 else "are"
        logger.warning("%s %s ignored: the environment options choose the tools of %s", " and ".join(given), verb, why)


def print_metrics(summary: dict[str, Any]) -> None:
    """Print the tool metrics table (:func:`~websailor.tools.metrics.metrics_table`) on stderr,
    at full width when stderr is a log file; nothing when no tool was offered."""
    from rich.console import Console

    from websailor.tools.metrics import metrics_table

    if not summary:
        return
    console = Console(stderr=True)
    if not console.is_terminal:  # a log file: no 80-column wrapping of the table
        console = Console(stderr=True, width=200)
    console.print(metrics_table(summary))


def agent_config(
    max_calls: int,
    max_tokens: int | None,
    timeout: float | None,
    temperature: float,
    seed: int,
    task: str = "qa",
    summarize_at: float | None = None,
    top_p: float = 0.95,
    presence_penalty: float = 1.1,
) -> Any:
    """The :class:`~websailor.agent.AgentConfig` of the agent options (finite numbers only;
    ``None``: the model's own budget). ``summarize_at``: ``None`` takes the task's default
    (:data:`~websailor.agent.loop.REPORT_SUMMARIZE_AT` on reports, never on QA), 0 never.
    ``temperature``, ``top_p`` and ``presence_penalty`` default to the paper's evaluation
    sampler (0.85, 0.95, 1.1); RL samples at 1.0, 1.0 and 0."""
    from websailor.agent import AgentConfig
    from websailor.agent.loop import REPORT_SUMMARIZE_AT
    from websailor.models import SamplingParams

    task = getattr(task, "value", task)
    check_finite(
        temperature=temperature,
        top_p=top_p,
        presence_penalty=presence_penalty,
        timeout=timeout,
        summarize_at=summarize_at,
    )
    if top_p <= 0:
        fail("--top-p must be above 0 (1 samples from every token)")
    if summarize_at is None:
        summarize_at = REPORT_SUMMARIZE_AT if task == "report" else None
    return AgentConfig(
        max_calls=max_calls,
        max_tokens_per_turn=max_tokens,
        timeout_s=timeout,
        seed=seed,
        sampling=SamplingParams(temperature=temperature, top_p=top_p, presence_penalty=presence_penalty),
        task=task,
        summarize_at=summarize_at or None,
    )
