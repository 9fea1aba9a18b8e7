"""The real-web environment against a local fault-injecting imitation of the providers:
retries, Retry-After, failover, circuit breaking, caching, size limits, bad bytes, and the
observation the agent gets when everything fails."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from fakes import provider_environ

from websailor.errors import ConfigError
from websailor.tools.environment import EnvSpec, open_environment
from websailor.tools.web import build_web_tools, load_web_settings
from websailor.tools.web.executor import CircuitBreaker
from websailor.tools.web.failures import Failure, ProviderFailure
from websailor.tools.web.fault_server import FaultPlan, FaultServer
from websailor.tools.web.http_call import HttpReply, parse_retry_after
from websailor.tools.web.providers import clean_markdown, normalize_query, normalize_url

FAST = {
    "timeout_s": 1.0,
    "retries": 2,
    "backoff_s": 0.01,
    "backoff_max_s": 0.05,
    "retry_after_max_s": 3,
    "breaker_failures": 100,
    "qps": 0,
}


@pytest.fixture
def server():
    with FaultServer(FaultPlan(hang_s=30, drip_interval_s=0.3)) as s:
        yield s


def web(server: FaultServer, tmp_path: Path, policy: dict | None = None, config: dict | None = None, **env: str):
    import yaml

    cfg = tmp_path / "web.yaml"
    pol = {**FAST, **(policy or {})}
    cfg.write_text(
        yaml.safe_dump({"policies": {t: pol for t in ("search", "google_scholar", "visit")}, **(config or {})})
    )
    tools, executor = build_web_tools(
        load_web_settings(cfg, provider_environ(server, tmp_path, **env)), names=("search", "visit", "google_scholar")
    )
    return tools, executor


def stats(executor, tool="search"):
    return executor.metrics.summary()[tool]


def test_search_ok_and_cached_across_executors(server, tmp_path):
    tools, ex = web(server, tmp_path)
    r = tools["search"].execute({"query": ["Eiffel tower", "Seine river"]})
    assert r.error is None
    assert "A search for 'Eiffel tower' found 10 results" in r.observation
    assert "1. [Result 1 for Eiffel tower](" in r.observation and "Snippet 1 about Seine river." in r.observation
    served = sum(server.served.values())
    again = tools["search"].execute({"query": ["  EIFFEL   Tower "]})  # same normalized query
    assert "Result 1 for Eiffel tower" in again.observation  # the provider got the query as written first
    assert sum(server.served.values()) == served
    assert stats(ex)["cache_hits"] == 1 and stats(ex)["requests"] == 3
    ex.close()
    tools2, ex2 = web(server, tmp_path)  # another executor (as another process) on the same cache file
    tools2["search"].execute({"query": ["seine river"]})
    assert sum(server.served.values()) == served and stats(ex2)["cache_hits"] == 1
    ex2.close()


def test_429_honours_retry_after(server, tmp_path):
    server.plan.retry_after = "1"
    server.plan.script("serper", "429")
    tools, ex = web(server, tmp_path)
    t0 = time.perf_counter()
    r = tools["search"].execute({"query": ["rate limits"]})
    assert time.perf_counter() - t0 >= 1.0
    assert "Result 1 for rate limits" in r.observation
    s = stats(ex)
    assert s["retries"] == 1 and s["request_errors"] == {"rate_limited": 1} and s["failovers"] == 0
    assert server.served[("serper", "429")] == 1 and server.served[("serper", "ok")] == 1
    ex.close()


@pytest.mark.parametrize(
    "fault,kind",
    [
        ("500", "server_error"),
        ("hang", "timeout"),
        ("drip", "timeout"),
        ("truncated", "truncated"),
        ("badjson", "bad_response"),
    ],
)
def test_retryable_fault_is_retried_then_succeeds(server, tmp_path, fault, kind):
    server.plan.script("serper", fault)
    tools, ex = web(server, tmp_path)
    r = tools["search"].execute({"query": ["retry me"]})
    assert r.error is None and "Result 1 for retry me" in r.observation
    s = stats(ex)
    assert s["retries"] == 1 and s["request_errors"] == {kind: 1} and s["failovers"] == 0 and s["degraded"] == 0
    ex.close()


def test_persistent_5xx_fails_over_to_searxng(server, tmp_path):
    server.plan.always["serper"] = "500"
    tools, ex = web(server, tmp_path)
    r = tools["search"].execute({"query": ["fail over"]})
    assert "Result 1 for fail over" in r.observation
    assert server.served[("serper", "500")] == 3  # first attempt + 2 retries
    s = stats(ex)
    assert s["failovers"] == 1 and s["retries"] == 2 and s["request_errors"] == {"server_error": 3}
    ex.close()


def test_wrong_key_is_not_retried_and_fails_over(server, tmp_path):
    tools, ex = web(server, tmp_path, SERPER_API_KEY="wrong")
    r = tools["search"].execute({"query": ["auth"]})
    assert "Result 1 for auth" in r.observation and r.env_failures == ()  # the backup answered
    s = stats(ex)
    assert s["retries"] == 0 and s["request_errors"] == {"unusable": 1} and s["failovers"] == 1
    assert ex.unusable() == {("search", "serper"): "HTTP 403: Unauthorized. (check the API key and the plan)"}
    ex.close()


def test_every_provider_down_gives_an_informative_observation(server, tmp_path):
    server.plan.always.update(serper="500", searxng="hang")
    tools, ex = web(server, tmp_path, policy={"timeout_s": 0.3, "retries": 1})
    r = tools["search"].execute({"query": ["nothing works"]})
    assert r.error is not None
    assert r.observation.startswith("[search] Error: The search for 'nothing works' failed (")
    assert "serper: server_error, HTTP 500" in r.observation and "searxng: timeout" in r.observation
    assert stats(ex)["degraded"] == 1
    ex.close()


def test_one_query_failing_keeps_the_others(server, tmp_path):
    tools, ex = web(server, tmp_path, policy={"retries": 0})
    server.plan.script("serper", "ok", "500")
    server.plan.script("searxng", "500")
    r = tools["search"].execute({"query": ["first", "second"]})
    assert r.error is None
    assert r.observation.count("Result 1 for") == 1
    assert "The search for 'second' failed (serper: server_error, HTTP 500; searxng: server_error" in r.observation
    ex.close()


def test_circuit_breaker_skips_a_failing_provider(server, tmp_path):
    server.plan.always["serper"] = "500"
    tools, ex = web(server, tmp_path, policy={"retries": 0, "breaker_failures": 2, "breaker_reset_s": 0.5})
    for i in range(5):
        assert "Result 1 for" in tools["search"].execute({"query": [f"q{i}"]}).observation
    assert server.served[("serper", "500")] == 2  # then the circuit opened
    assert stats(ex)["request_errors"]["circuit_open"] == 3
    time.sleep(0.6)
    tools["search"].execute({"query": ["after reset"]})  # the half-open trial goes to serper again
    assert server.served[("serper", "500")] == 3
    ex.close()


def test_breaker_states():
    b = CircuitBreaker(failures=2, reset_s=0.1)
    b.failure()
    assert b.allow() and b.state == "closed"
    b.failure()
    assert not b.allow() and b.state == "open"
    time.sleep(0.12)
    assert b.allow() and b.state == "half-open" and not b.allow()  # one trial only
    b.success()
    assert b.state == "closed" and b.allow()


def test_visit_reads_through_jina_and_ranks_for_the_goal(server, tmp_path):
    tools, ex = web(server, tmp_path)
    r = tools["visit"].execute({"url": f"{server.url}/page/Springfield", "goal": "the population in the census"})
    assert r.error is None
    evidence = r.observation.split("Evidence in page:\n")[1]
    assert evidence.startswith("The population of Springfield was 12,345")
    assert server.served[("jina", "ok")] == 1 and server.served[("page", "ok")] == 0
    ex.close()


def test_visit_redirect_loop_fails_over_to_direct_fetch(server, tmp_path):
    server.plan.always["jina"] = "redirect"
    tools, ex = web(server, tmp_path, policy={"timeout_s": 10})  # parsing counts too: room for a busy machine
    r = tools["visit"].execute({"url": f"{server.url}/page/Springfield", "goal": "who founded it"})
    assert "founded in 1901 by Ada Example" in r.observation
    assert "Home" not in r.observation.split("Evidence in page:")[1]  # trafilatura dropped the navigation
    s = stats(ex, "visit")
    assert s["request_errors"] == {"redirect_loop": 1} and s["retries"] == 0 and s["failovers"] == 1
    ex.close()


def test_visit_50mb_page_is_cut_at_the_size_limit(server, tmp_path):
    server.plan.always["jina"] = "huge"
    tools, ex = web(server, tmp_path, policy={"max_bytes": 1_000_000, "timeout_s": 10})
    t0 = time.perf_counter()
    r = tools["visit"].execute({"url": f"{server.url}/page/Big", "goal": "anything"})
    assert time.perf_counter() - t0 < 10
    assert "only its beginning was read" in r.observation and r.error is None
    ex.close()


def test_non_utf8_bytes_without_a_charset_are_read_as_windows_1252_not_fatal(server, tmp_path):
    server.plan.script("serper", "latin1")
    server.plan.script("jina", "latin1")
    tools, ex = web(server, tmp_path)
    r = tools["search"].execute({"query": ["cafes"]})
    assert "Caf\u00e9 snippet 1 about cafes." in r.observation  # as a browser reads it, not U+FFFD
    v = tools["visit"].execute({"url": f"{server.url}/page/Latin", "goal": "founder"})
    assert "Ada Example" in v.observation and v.error is None
    assert stats(ex)["retries"] == 0
    ex.close()


def test_reply_bodies_are_decoded_once_for_text_and_json():
    def reply(body: bytes, ctype: str = "application/json") -> HttpReply:
        return HttpReply(200, httpx.Headers({"content-type": ctype}), body, False, "http://x")

    assert reply(b'\xef\xbb\xbf{"q": "caf\xc3\xa9"}').json() == {"q": "caf\u00e9"}  # a BOM is skipped
    assert reply("Привет".encode("koi8-r"), "text/markdown; charset=koi8-r").text() == "Привет"
    with pytest.raises(ProviderFailure, match="invalid JSON"):
        reply(b"<html>busy</html>").json()


def test_scholar_through_serper(server, tmp_path):
    tools, ex = web(server, tmp_path)
    r = tools["google_scholar"].execute({"query": ["graph neural networks"]})
    assert "## Scholar Results" in r.observation and "Cited by 10." in r.observation
    ex.close()


def test_bad_urls_get_observations(server, tmp_path):
    tools, ex = web(server, tmp_path)
    r = tools["visit"].execute({"url": ["ftp://example.org/x", "not a url"], "goal": "x"})
    assert r.observation.count("cannot be visited") == 2
    r = tools["visit"].execute({"url": f"{server.url}/missing/page", "goal": "x"})
    assert (
        "(jina: target_error, the site answered HTTP 404 (Not Found) to the reader; "
        "direct: client_error, HTTP 404 (not found))"
    ) in r.observation
    assert r.env_failures == ()  # a dead link is the model's choice
    assert (
        r.observation.endswith("Try another page with the same information, or search for it.\n")
        or "Try another page" in r.observation
    )
    ex.close()


def test_missing_provider_settings_name_the_variables(monkeypatch):
    with pytest.raises(ConfigError, match="SERPER_API_KEY.*SEARXNG_BASE_URL"):
        build_web_tools(load_web_settings(None, {"JINA_API_KEY": "k"}))
    for var in ("SERPER_API_KEY", "SEARXNG_BASE_URL", "WEBSAILOR_WEB_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="SERPER_API_KEY.*SEARXNG_BASE_URL"):
        open_environment(EnvSpec(kind="web"))


def test_bad_web_config_is_refused(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("policies:\n  search:\n    qps: fast\n")
    with pytest.raises(ConfigError, match="policies.search"):
        load_web_settings(bad, {"SERPER_API_KEY": "k"}).policy("search")
    bad.write_text("policies:\n  search:\n    speed: 3\n")
    with pytest.raises(ConfigError, match="unknown field.*speed"):
        load_web_settings(bad, {"SERPER_API_KEY": "k"})
    with pytest.raises(ConfigError, match="SERPER_BASE_URL"):
        load_web_settings(None, {"SERPER_API_KEY": "k", "SERPER_BASE_URL": "google.serper.dev"})
    with pytest.raises(ConfigError, match="does not exist"):
        load_web_settings(tmp_path / "nope.yaml", {})
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_web_settings(bad, {})


def test_normalization():
    assert normalize_query("  The   Eiffel\tTOWER ") == "the eiffel tower"
    assert normalize_url("HTTPS://En.Wikipedia.org/wiki/Paris#History") == "https://en.wikipedia.org/wiki/Paris"
    assert normalize_url("en.wikipedia.org/wiki/Nile") == "https://en.wikipedia.org/wiki/Nile"  # as the local visit
    assert clean_markdown("# Page Capital\\_City\n\nA \\* b") == "## Page Capital_City\n\nA * b"
    with pytest.raises(ValueError):
        normalize_url("javascript:alert(1)")
    assert parse_retry_after("3") == 3.0 and parse_retry_after("soon") is None
    assert 0 <= parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") < 1  # a date in the past: no wait


# -- found by the breaker ------------------------------------------------------------------


def test_dead_links_do_not_open_the_readers_circuits(server, tmp_path):
    tools, ex = web(server, tmp_path, policy={"retries": 0, "breaker_failures": 2})
    for i in range(4):
        r = tools["visit"].execute({"url": f"{server.url}/missing/{i}", "goal": "x"})
        assert "HTTP 404 (not found)" in r.observation
    good = tools["visit"].execute({"url": f"{server.url}/page/Springfield", "goal": "founder"})
    assert "Ada Example" in good.observation and "circuit" not in good.observation
    ex.close()


def test_private_addresses_are_refused_unless_allowed(server, tmp_path):
    tools, ex = web(server, tmp_path, config={"use_jina": False}, WEBSAILOR_WEB_ALLOW_PRIVATE="0")
    r = tools["visit"].execute({"url": f"{server.url}/page/Springfield", "goal": "x"})
    assert "blocked, 127.0.0.1 is a private or local address" in r.observation
    for address in ("169.254.169.254", "100.100.100.200", "[::ffff:127.0.0.1]"):
        r = tools["visit"].execute({"url": f"http://{address}/latest/meta-data/", "goal": "x"})
        assert "blocked" in r.observation, address
    ex.close()


def test_dns_rebinding_is_caught_at_the_connection(server, tmp_path, monkeypatch):
    """The name check passes (as if the first DNS answer were public), but the answer comes
    from a loopback address: refused before the body is read."""
    import websailor.tools.web.providers as providers

    async def looks_public(url):
        return None

    monkeypatch.setattr(providers, "check_public", looks_public)
    tools, ex = web(server, tmp_path, config={"use_jina": False}, WEBSAILOR_WEB_ALLOW_PRIVATE="0")
    r = tools["visit"].execute({"url": f"{server.url}/page/Springfield", "goal": "x"})
    assert "blocked, 127.0.0.1 is a private or local address" in r.observation and "Ada" not in r.observation
    ex.close()


def test_provider_bugs_become_observations_and_free_the_half_open_trial(server, tmp_path):
    from websailor.tools.web.executor import ToolExecutor, ToolPolicy

    class Broken:
        name = "broken"
        calls = 0

        async def __call__(self, client, request, policy):
            Broken.calls += 1
            raise KeyError("organic")

    with ToolExecutor({"search": ToolPolicy(retries=0, breaker_failures=1, breaker_reset_s=0.05, qps=0.5)}) as ex:
        out = ex.call("search", {"q": "x"}, [Broken()])
        assert not out.ok and out.failure_text() == "broken: provider_error, KeyError"
        assert out.failures == [Failure("broken", "provider_error", "provider_error, KeyError")]
        assert out.env_failure == "provider_error"
        time.sleep(0.06)
        ex.call("search", {"q": "y"}, [Broken()])  # the half-open trial fails...
        time.sleep(0.06)
        ex.call("search", {"q": "z"}, [Broken()])  # ...and the next trial is let through again
        assert Broken.calls == 3


def test_close_with_calls_in_flight_returns_failures_then_restarts(server, tmp_path):
    import threading

    server.plan.always["serper"] = "hang"
    tools, ex = web(server, tmp_path, policy={"timeout_s": 20, "retries": 0})
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", tools["search"].execute({"query": ["slow"]})))
    t.start()
    time.sleep(0.3)
    ex.close()
    t.join(timeout=5)
    assert not t.is_alive() and "cancelled: the tool environment was closed" in box["r"].observation
    assert box["r"].env_failures == ("cancelled",) and box["r"].error
    server.plan.always.clear()
    assert "Result 1 for again" in tools["search"].execute({"query": ["again"]}).observation  # a fresh loop
    ex.close()


def test_per_tool_cache_ttl(server, tmp_path):
    tools, ex = web(server, tmp_path, policy={"cache_ttl_s": 0.2})
    tools["search"].execute({"query": ["ttl"]})
    time.sleep(0.3)
    tools["search"].execute({"query": ["ttl"]})
    assert stats(ex)["cache_hits"] == 0 and server.served[("serper", "ok")] == 2
    ex.close()


def test_keys_are_cleaned_and_never_echoed(tmp_path):
    s = load_web_settings(None, {"SERPER_API_KEY": "  sk-123\n"})
    assert s.serper_api_key.get_secret_value() == "sk-123"
    cfg = tmp_path / "k.yaml"
    cfg.write_text('serper_api_key: "sk-\u00e9-secret"\n')
    with pytest.raises(ConfigError) as e:
        load_web_settings(cfg, {})
    assert "secret" not in str(e.value) and "printable ASCII" in str(e.value)
    cfg.write_text("serper_api_key: ''\n")
    with pytest.raises(ConfigError, match="SERPER_API_KEY"):
        build_web_tools(load_web_settings(cfg, {}))
    cfg.write_text("policies:\n  search: {timeout_s: .nan}\n")
    with pytest.raises(ConfigError, match="timeout_s"):
        load_web_settings(cfg, {}).policy("search")


def test_a_foreign_sqlite_file_is_not_taken_for_a_cache(tmp_path):
    import sqlite3

    from websailor.tools.web.cache import ResultCache

    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("CREATE TABLE results (id INTEGER, score REAL)")
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="not a websailor tool cache"):
        ResultCache(tmp_path / "other.sqlite")


def test_close_while_other_threads_keep_calling_returns(server, tmp_path):
    import threading

    tools, ex = web(server, tmp_path, policy={"cache_ttl_s": 0})
    stop = threading.Event()

    def hammer(i):
        n = 0
        while not stop.is_set():
            tools["search"].execute({"query": [f"t{i} {n}"]})
            n += 1

    threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    closer = threading.Thread(target=ex.close)
    closer.start()
    closer.join(timeout=10)
    assert not closer.is_alive(), "close() hung while calls kept coming"
    stop.set()
    for t in threads:
        t.join(timeout=10)
    ex.close()
