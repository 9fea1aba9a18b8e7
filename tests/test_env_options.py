"""One environment spec for every command: each command that runs the agent (and ``tool`` and
``serve tools``) takes every environment option, turns them into one ``EnvSpec`` and builds
its tools from it; options that do not apply are named in one warning line, the same in every
command.

The parametrized test runs each command for real up to the point where it has built its tool
environment (the real ``open_environment``, spied on), checks that the option took effect in
the tools it built, and stops the command there. The web options run against the
fault-injecting provider imitation, ``--tools-url`` against a served tool set."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from websailor.cli import app
from websailor.errors import ConfigError
from websailor.tools import environment
from websailor.tools.environment import EnvSpec

runner = CliRunner()
HERE = Path(__file__).resolve().parent  # an existing folder for --files-dir
DEAD_MODEL = "openai:m@http://127.0.0.1:9/v1"  # never called: the commands stop once the tools are built


# -- EnvSpec --------------------------------------------------------------------------------------
def test_spec_from_options_splits_tools_and_names_bad_values():
    spec = EnvSpec.from_options(kind="local", tools=" search , parse_file", corpus=None, files_dir=HERE)
    assert spec.tools == ("search", "parse_file") and spec.offered() == ("search", "parse_file")
    assert EnvSpec.from_options(kind="web").offered() == environment.DEFAULT_TOOLS["web"]
    with pytest.raises(ConfigError, match="^--tools is empty: give comma-separated tool names$"):
        EnvSpec.from_options(tools=" , ")
    with pytest.raises(ConfigError, match="^--env: Input should be 'local', 'web' or 'none'$"):
        EnvSpec.from_options(kind="moon")
    with pytest.raises(ConfigError, match="^--summary-model is empty$"):
        EnvSpec.from_options(summary_model="  ")
    with pytest.raises(ValueError, match="extra"):
        EnvSpec(colour="blue")


@pytest.mark.parametrize(
    "spec, lines",
    [
        (EnvSpec(), []),
        (EnvSpec(web_config=Path("w.yaml")), ["--web-config is ignored: it configures --env web"]),
        (EnvSpec(kind="web", corpus=Path("c")), ["--corpus is ignored: --env web searches and reads the real web"]),
        (
            EnvSpec(kind="none", corpus=Path("c"), summary_model="smollm2"),
            ["--corpus is ignored: --env none has no tools", "--summary-model is ignored: --env none has no tools"],
        ),
        (
            EnvSpec(kind="web", tools_url="http://h:1", files_dir=HERE),
            [
                "--env web is ignored: the tools are the tool server's at http://h:1",
                "--files-dir is ignored: the tools are the tool server's at http://h:1 "
                "(give it to `websailor serve tools`)",
            ],
        ),
        (
            EnvSpec(files_dir=HERE, unsafe_python=True, summary_model="smollm2", tools=("search",)),
            [
                "--files-dir is ignored: parse_file is not among the tools (search)",
                "--unsafe-python is ignored: PythonInterpreter is not among the tools (search)",
                "--summary-model is ignored: visit is not among the tools (search)",
            ],
        ),
        (EnvSpec(kind="web", files_dir=HERE, unsafe_python=True), []),
    ],
)
def test_ignored_options_are_named_one_line_each(spec: EnvSpec, lines: list[str]):
    assert spec.ignored() == lines


def test_record_keeps_older_local_runs_identical():
    assert EnvSpec().record() == {}
    assert EnvSpec(corpus=Path("/c"), web_config=Path("w"), files_dir=HERE).record() == {"corpus": "/c"}
    assert EnvSpec(kind="web", tools=("search",)).record() == {"env": "web", "tools_url": None, "tools": ["search"]}
    assert EnvSpec(summary_model="smollm2").record() == {"summary_model": "smollm2"}


def test_open_environment_warns_about_what_it_ignores(vital_dir: Path, caplog: pytest.LogCaptureFixture):
    with environment.open_environment(EnvSpec(corpus=vital_dir, web_config=Path("w.yaml"))) as env:
        assert sorted(env.tools) == ["search", "visit"]
    assert "--web-config is ignored: it configures --env web" in caplog.text


# -- every command, every option ------------------------------------------------------------------
class Opened(Exception):
    """Raised by the spy once the command has built its tool environment."""


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list]:
    """Spy on ``open_environment``: record ``(spec, environment)``, then stop the command."""
    seen: list = []
    real = environment.open_environment

    def spy(spec=None, **kwargs):
        env = real(spec, **kwargs)
        seen.append((spec, env))
        raise Opened

    monkeypatch.setattr("websailor.tools.environment.open_environment", spy)  # every caller imports it when it runs
    yield seen
    for _, env in seen:
        env.close()


@pytest.fixture
def providers(monkeypatch, tmp_path):
    from fakes import web_providers

    with web_providers(monkeypatch, tmp_path) as server:
        yield server


@pytest.fixture(scope="module")
def files(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The inputs each command needs: a benchmark, a QA file with a train split, a tiny model
    with the SmolLM2 tokenizer (for train rl and the expert's token budget), a files folder."""
    from tests.test_sft import _save_tiny

    root = tmp_path_factory.mktemp("envopts")
    bench = root / "bench.jsonl"
    bench.write_text(json.dumps({"id": "q1", "question": "Which river flows through Cairo?", "answer": "Nile"}) + "\n")
    qa = root / "qa.jsonl"
    items = [
        {
            "id": f"sf-{i}",
            "question": f"Which river number {i} flows through Cairo?",
            "answer": "Nile",
            "aliases": [],
            "topology_hash": "h",
            "constraints": [],
            "split": "train",
        }
        for i in range(2)
    ]
    qa.write_text("".join(json.dumps(it) + "\n" for it in items))
    docs = root / "docs"
    docs.mkdir()
    (docs / "note.txt").write_text("The Nile flows through Cairo.")
    tiny = _save_tiny(root / "tiny", smollm2_path)
    return {"bench": bench, "qa": qa, "tiny": tiny, "docs": docs, "root": root}


def command(name: str, files: dict[str, Path], vital_dir: Path, tmp_path: Path) -> list[str]:
    """The command line of ``name`` up to its environment options."""
    return {
        "run": ["run", "Which river flows through Cairo?", "--model", DEAD_MODEL],
        "eval": ["eval", "--bench", str(files["bench"]), "--out", str(tmp_path / "eval"), "--model", DEAD_MODEL],
        "synth": [
            "synth",
            "--n",
            "1",
            "--out",
            str(tmp_path / "qa.jsonl"),
            "--filter-with",
            DEAD_MODEL,
            "--corpus",
            str(vital_dir),
        ],
        "traj": [
            "traj",
            "build",
            "--out",
            str(tmp_path / "sft.jsonl"),
            "--qa",
            str(files["qa"]),
            "--source",
            "expert",
            "--expert",
            DEAD_MODEL,
            "--tokenizer",
            f"hf:{files['tiny']}",
        ],
        "train-rl": [
            "train",
            "rl",
            "--data",
            str(files["qa"]),
            "--out",
            str(tmp_path / "rl"),
            "--model",
            f"hf:{files['tiny']}",
            "--group-size",
            "2",
            "--batch",
            "2",
        ],
    }[name]


def _inner(env, name: str):
    return env.tools[name].inner


COMMANDS = ["run", "eval", "synth", "traj", "train-rl"]
OPTIONS = ["--env", "--corpus", "--tools-url", "--web-config", "--tools", "--files-dir", "--unsafe-python",
           "--summary-model", "--observations"]  # fmt: skip


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_takes_every_environment_option(
    name: str, option: str, opened: list, files: dict, vital_dir: Path, tmp_path: Path, request: pytest.FixtureRequest
):
    from tests.test_server import serving
    from websailor.server import create_app
    from websailor.tools.local import build_local_tools

    args = command(name, files, vital_dir, tmp_path)
    base_corpus = [] if name == "synth" else ["--corpus", str(vital_dir)]  # synth names its corpus already

    def invoke(*extra: str):
        res = runner.invoke(app, [*args, *extra])
        assert isinstance(res.exception, Opened), res.output
        assert len(opened) == 1
        return opened[0]

    if option == "--env":
        request.getfixturevalue("providers")
        spec, env = invoke("--env", "web")
        assert spec.kind == "web" and env.name == "web" and "google_scholar" in env.tools
        assert "Springfield" in env.tools["search"]('{"query": ["Springfield"]}')
    elif option == "--corpus":
        extra = ["--corpus", str(files["root"] / "no-corpus-here")] if name != "synth" else []
        if name == "synth":  # synth's --corpus is the synthesis corpus and the reference agent's
            spec, env = invoke()
            assert spec.corpus == vital_dir and Path(_inner(env, "search").corpus.path).resolve() == vital_dir.resolve()
        else:
            res = runner.invoke(app, [*args, *extra])
            assert res.exit_code == 2 and "no-corpus-here" in res.stderr  # the corpus it was given, not the default
            opened.clear()
            spec, env = invoke("--corpus", str(vital_dir))
            assert spec.corpus == vital_dir and Path(_inner(env, "search").corpus.path).resolve() == vital_dir.resolve()
    elif option == "--tools-url":
        with serving(create_app(build_local_tools(_corpus(vital_dir)), "local")) as url:
            spec, env = invoke("--tools-url", url)
            assert spec.tools_url == url and env.url == url and sorted(env.tools) == ["search", "visit"]
            assert "Mona Lisa" in env.tools["search"]('{"query": ["Mona Lisa"]}')
    elif option == "--web-config":
        server = request.getfixturevalue("providers")
        for var in ("SERPER_API_KEY", "SERPER_BASE_URL", "SEARXNG_BASE_URL"):
            request.getfixturevalue("monkeypatch").delenv(var)
        config = tmp_path / "web.yaml"
        config.write_text(f"searxng_base_url: {server.url}/searxng\nallow_private_urls: true\n")
        spec, env = invoke("--env", "web", "--web-config", str(config))
        assert spec.web_config == config
        assert "Springfield" in env.tools["search"]('{"query": ["Springfield"]}')  # SearXNG, from the file
    elif option == "--tools":
        spec, env = invoke(*base_corpus, "--tools", "search")
        assert spec.tools == ("search",) and list(env.tools) == ["search"]
    elif option == "--files-dir":
        spec, env = invoke(*base_corpus, "--tools", "search,parse_file", "--files-dir", str(files["docs"]))
        assert _inner(env, "parse_file").files_root == files["docs"].resolve()
        assert "flows through Cairo" in env.tools["parse_file"]('{"files": ["note.txt"]}')
    elif option == "--unsafe-python":
        spec, env = invoke(*base_corpus, "--tools", "PythonInterpreter", "--unsafe-python")
        assert spec.unsafe_python and _inner(env, "PythonInterpreter").allow_unsafe
    elif option == "--observations":  # with the single options that override the preset
        spec, env = invoke(*base_corpus, "--observations", "compact", "--search-results", "3")
        assert spec.observations() == {"search_results": 3, "snippet_chars": 160, "evidence_chars": 800}
        assert _inner(env, "search").top_k == 3 and _inner(env, "search").snippet_chars == 160
        assert _inner(env, "visit").max_evidence_chars == 800 and env.settings == spec.observations()
    else:
        spec, env = invoke(*base_corpus, "--summary-model", "openai:extractor@http://127.0.0.1:9/v1")
        assert _inner(env, "visit").summary_model.name == "openai:extractor@http://127.0.0.1:9/v1"


def _corpus(path: Path):
    from websailor.corpus import Corpus

    return Corpus.open(path)


def test_options_that_do_not_apply_are_named_the_same_way_in_every_command(
    opened: list, files: dict, vital_dir: Path, tmp_path: Path
):
    for name in COMMANDS:
        opened.clear()
        base_corpus = [] if name == "synth" else ["--corpus", str(vital_dir)]
        res = runner.invoke(app, [*command(name, files, vital_dir, tmp_path), *base_corpus, "--web-config", "w.yaml"])
        assert isinstance(res.exception, Opened), res.output
        assert res.stderr.count("--web-config is ignored: it configures --env web") == 1, (name, res.stderr)


def test_environment_options_outside_their_use_are_named(vital_dir: Path, tmp_path: Path):
    qa = tmp_path / "qa.jsonl"
    res = runner.invoke(app, ["synth", "--n", "1", "--out", str(qa), "--corpus", str(vital_dir), "--env", "web"])
    assert res.exit_code == 0, res.output
    assert (
        "WARNING: --env is ignored: the environment options choose the tools of --filter-with's reference agent\n"
        in res.stderr
    )
    traj = ["traj", "build", "--qa", str(qa), "--out", str(tmp_path / "t.jsonl"), "--corpus", str(vital_dir)]
    res = runner.invoke(app, [*traj, "--tools", "search", "--summary-model", "smollm2"])
    assert res.exit_code == 0, res.output
    assert (
        "WARNING: --tools and --summary-model are ignored: the environment options choose the tools of --source "
        "expert (constructive trajectories replay through the local tools over --corpus)\n" in res.stderr
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--files-dir", "no-such-folder"], "error: --files-dir: no-such-folder: no such directory"),
        (["--tools", "search,search"], "error: --tools names search more than once"),
        (["--tools-url", "notaurl"], "error: --tools-url: notaurl: expected http(s)://HOST[:PORT]"),
        (["--tools-url", "http://127.0.0.1:99999"], "error: --tools-url: http://127.0.0.1:99999: not a valid URL"),
        (["--summary-model", "bogus"], "error: --summary-model: unknown model spec 'bogus'"),
        (["--tools", "google_scholar"], "add --env web for the web's tools"),
    ],
)
def test_a_bad_environment_option_gets_the_same_line_in_every_command(
    extra: list[str], message: str, files: dict, vital_dir: Path, tmp_path: Path
):
    for name in COMMANDS:
        base_corpus = [] if name == "synth" else ["--corpus", str(vital_dir)]
        res = runner.invoke(app, [*command(name, files, vital_dir, tmp_path / name), *base_corpus, *extra])
        assert res.exit_code == 2 and message in res.stderr and "Traceback" not in res.output, (name, res.output)


def test_env_none_with_a_tool_server_is_the_servers_environment_everywhere(
    opened: list, files: dict, vital_dir: Path, tmp_path: Path
):
    from tests.test_server import serving
    from websailor.server import create_app
    from websailor.tools.local import build_local_tools

    with serving(create_app(build_local_tools(_corpus(vital_dir)), "local")) as url:
        for name in COMMANDS:
            opened.clear()
            res = runner.invoke(app, [*command(name, files, vital_dir, tmp_path), "--env", "none", "--tools-url", url])
            assert isinstance(res.exception, Opened), (name, res.output)
            assert f"--env none is ignored: the tools are the tool server's at {url}" in res.stderr


def test_the_tool_command_takes_env_none_with_a_tool_server(vital_dir: Path):
    from tests.test_server import serving
    from websailor.server import create_app
    from websailor.tools.local import build_local_tools

    with serving(create_app(build_local_tools(_corpus(vital_dir)), "local")) as url:
        res = runner.invoke(app, ["tool", "search", '{"query": ["Mona Lisa"]}', "--env", "none", "--tools-url", url])
    assert res.exit_code == 0 and "Mona Lisa" in res.stdout, res.output
    res = runner.invoke(app, ["tool", "search", '{"query": ["Mona Lisa"]}', "--env", "none"])
    assert res.exit_code == 2 and "error: --env none has no tools" in res.stderr


def test_expert_trajectories_take_any_questions_file(opened: list, files: dict, vital_dir: Path, tmp_path: Path):
    """A plain questions file has no splits: the expert reads all of it (a synth file gives its train split)."""
    args = command("traj", files, vital_dir, tmp_path)
    args[args.index("--qa") + 1] = str(files["bench"])
    res = runner.invoke(app, [*args, "--corpus", str(vital_dir)])
    assert isinstance(res.exception, Opened), res.output
