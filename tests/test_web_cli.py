"""The web environment and the tool server from the command line: run and eval with --env web
against the local provider imitation, --tools-url against a served tool set, the tool command
with the sandboxed interpreter, and clear refusals of missing settings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from websailor.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture
def providers(monkeypatch, tmp_path):
    from fakes import web_providers

    with web_providers(monkeypatch, tmp_path) as server:
        yield server


def agent_reply(messages):
    from fakes import call

    last = messages[-1]["content"]
    if "Evidence in page" in last:
        return "<think>The page says 1901.</think>\n<answer>1901</answer>"
    if "<tool_response>" in last:
        url = last.split("](")[1].split(")")[0]
        return call("visit", url=url, goal="when was it founded")
    return call("search", query=["Springfield founding"])


def test_run_and_eval_in_the_web_environment(providers, tmp_path):
    from fakes import FakeOpenAIServer

    providers.plan.script("serper", "500")  # one retried fault on the way
    with FakeOpenAIServer(reply=agent_reply) as srv:
        out = tmp_path / "t.jsonl"
        res = run(
            "run",
            "When was Springfield founded?",
            "--env",
            "web",
            "--model",
            f"openai:fake@{srv.url}",
            "--out",
            str(out),
        )
        assert res.exit_code == 0, res.output
        assert "prediction: 1901" in res.stdout
        traj = json.loads(out.read_text())
        assert traj["env"] == "web"
        assert "search" in traj["messages"][0]["content"] and "google_scholar" in traj["messages"][0]["content"]
        assert "Result 1 for Springfield founding" in traj["messages"][3]["content"]
        assert "founded in 1901 by Ada Example" in traj["messages"][5]["content"]
        metrics = json.loads((tmp_path / "t.jsonl.tool_metrics.jsonl").read_text())
        assert metrics["env"] == "web"
        assert metrics["tools"]["search"]["calls"] == 1 and metrics["tools"]["search"]["retries"] == 1
        assert metrics["tools"]["visit"]["calls"] == 1 and metrics["tools"]["visit"]["request_errors"] == {}
        assert "Tool metrics" in res.stderr

        bench = tmp_path / "b.jsonl"
        bench.write_text('{"id": "s1", "question": "When was Springfield founded?", "answer": "1901"}\n')
        res = run(
            "eval",
            "--bench",
            str(bench),
            "--out",
            str(tmp_path / "ev"),
            "--env",
            "web",
            "--rollouts",
            "2",
            "--model",
            f"openai:fake@{srv.url}",
        )
        assert res.exit_code == 0, res.output
        summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
        assert summary["avg_at_k"] == 1.0
        m = json.loads((tmp_path / "ev" / "tool_metrics.jsonl").read_text())
        assert m["tools"]["search"]["cache_hits"] >= 1  # the run above cached the query


def test_web_without_provider_settings_names_the_variables(monkeypatch, tmp_path):
    for var in ("SERPER_API_KEY", "SEARXNG_BASE_URL", "WEBSAILOR_WEB_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    res = run("run", "q?", "--env", "web", "--model", "openai:x@http://127.0.0.1:9/v1")
    assert res.exit_code == 2 and "SERPER_API_KEY" in res.stderr and "SEARXNG_BASE_URL" in res.stderr
    res = run("tool", "search", '{"query": ["x"]}', "--env", "web")
    assert res.exit_code == 2 and "SERPER_API_KEY" in res.stderr


def test_tool_command_web_and_python(providers):
    res = run("tool", "google_scholar", '{"query": ["transformers"]}', "--env", "web")
    assert res.exit_code == 0 and "## Scholar Results" in res.stdout
    res = run("tool", "PythonInterpreter", json.dumps({"code": "import math\nprint(math.factorial(10))"}))
    assert res.exit_code == 0 and res.stdout.strip() == "stdout:\n3628800"
    res = run("tool", "PythonInterpreter", json.dumps({"code": "print(open('/etc/passwd').read())"}))
    assert res.exit_code == 0 and "No such file or directory" in res.stdout
    res = run("run", "q?", "--tools", "search,nope", "--model", "openai:x@http://127.0.0.1:9/v1")
    assert res.exit_code == 2 and "no tool 'nope'" in res.stderr
    res = run("run", "q?", "--tools", "PythonInterpreter,parse_file", "--model", "openai:x@http://127.0.0.1:9/v1")
    assert res.exit_code == 2 and "--files-dir" in res.stderr
    res = run("tool", "google_scholar", '{"query": ["x"]}')
    assert res.exit_code == 2 and "add --env web" in res.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_tools_and_use_them_with_tools_url(vital_dir: Path, tmp_path):
    from fakes import FakeOpenAIServer, call

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "websailor.cli", "serve", "tools", "--port", str(port), "--corpus", str(vital_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            pytest.fail(f"the tool server did not start: {proc.stderr.read1().decode()}")

        def reply(messages):
            if "<tool_response>" in messages[-1]["content"]:
                return "<answer>Leonardo da Vinci</answer>"
            return call("search", query=["Mona Lisa painter"])

        with FakeOpenAIServer(reply=reply) as srv:
            out_remote, out_local = tmp_path / "remote.jsonl", tmp_path / "local.jsonl"
            res = run(
                "run",
                "Who painted the Mona Lisa?",
                "--tools-url",
                url,
                "--model",
                f"openai:fake@{srv.url}",
                "--out",
                str(out_remote),
            )
            assert res.exit_code == 0, res.output
            res = run(
                "run",
                "Who painted the Mona Lisa?",
                "--corpus",
                str(vital_dir),
                "--model",
                f"openai:fake@{srv.url}",
                "--out",
                str(out_local),
            )
            assert res.exit_code == 0, res.output
        remote, local = (json.loads(p.read_text()) for p in (out_remote, out_local))
        assert remote["env"] == "local" and remote["messages"] == local["messages"]
        served = httpx.get(f"{url}/metrics").json()
        assert served["search"]["calls"] == 1
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    res = run("run", "q?", "--tools-url", url, "--model", "openai:x@http://127.0.0.1:9/v1")
    assert res.exit_code == 2 and url in res.stderr
