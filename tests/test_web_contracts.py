"""The web layer against the services' real contracts, over loopback against the imitation:
which failures are the environment's (ToolResult.env_failures), providers that cannot serve for
the rest of the run, the Jina Reader's 200 answer for a dead page, SearXNG's unresponsive
engines, limiter and disabled JSON format, and Serper's locale and result fields as the
released Tongyi tools use them."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
import yaml
from fakes import provider_environ

from websailor.tools.web import build_web_tools, load_web_settings
from websailor.tools.web.executor import ToolExecutor, ToolPolicy
from websailor.tools.web.failures import CANCELLED, Failure, Outcome, ProviderFailure
from websailor.tools.web.fault_server import FaultPlan, FaultServer, bot_refusal
from websailor.tools.web.providers import (
    SEARXNG_HEADERS,
    JinaReader,
    SearxngSearch,
    SerperSearch,
    query_locale,
)
from websailor.tools.web.tools import ToolUnavailableError, executor_fetch

FAST = {"timeout_s": 1.0, "retries": 0, "backoff_s": 0.01, "backoff_max_s": 0.05, "breaker_failures": 100, "qps": 0}


@pytest.fixture
def server():
    with FaultServer(FaultPlan(hang_s=30)) as s:
        yield s


def web(server: FaultServer, tmp_path: Path, policy: dict | None = None, **env: str):
    cfg = tmp_path / "web.yaml"
    pol = {**FAST, **(policy or {})}
    cfg.write_text(yaml.safe_dump({"policies": {t: pol for t in ("search", "google_scholar", "visit")}}))
    environ = provider_environ(server, tmp_path, **env)
    return build_web_tools(load_web_settings(cfg, environ), names=("search", "visit", "google_scholar"))


def page(server: FaultServer, name: str) -> str:
    return f"{server.url}/page/{name}"


# -- which failures are the environment's ----------------------------------------------------


def F(provider: str, kind: str, per_target: bool = False) -> Failure:
    return Failure(provider, kind, f"{kind}, detail", per_target)


@pytest.mark.parametrize(
    "failures,expected",
    [
        ([F("serper", "server_error"), F("searxng", "timeout")], "server_error"),  # search: both down
        ([F("serper", "unusable"), F("searxng", "upstream_unavailable")], "unusable"),
        ([F("jina", "server_error"), F("direct", "client_error", True)], None),  # reader down, the site 404s
        ([F("jina", "server_error"), F("direct", "timeout", True)], "server_error"),  # reader down, site slow
        ([F("jina", "target_error"), F("direct", "client_error", True)], None),  # a dead link twice
        ([F("jina", "target_error"), F("direct", "timeout", True)], None),  # the reader saw the target fail
        ([F("direct", "timeout", True)], None),  # a direct fetch alone: the site's failure
        ([F("jina", "circuit_open"), F("direct", "connection", True)], "circuit_open"),
        ([F("serper", "client_error"), F("searxng", "bad_response")], None),  # a request the API refused
        ([Failure("executor", CANCELLED, "cancelled")], CANCELLED),
        ([], None),  # no provider configured: a configuration error, raised at build time
    ],
)
def test_env_failure_classification(failures, expected):
    assert Outcome(failures=failures).env_failure == expected


def test_a_success_is_never_an_env_failure():
    assert Outcome("v", "searxng", failures=[F("serper", "server_error")]).env_failure is None


def test_search_with_every_provider_down_is_an_env_failure(server, tmp_path):
    server.plan.always.update(serper="500", searxng="500")
    tools, ex = web(server, tmp_path)
    r = tools["search"].execute({"query": ["nothing works"]})
    assert r.error and r.env_failures == ("server_error",)
    assert "serper: server_error, HTTP 500; searxng: server_error, HTTP 500" in r.observation
    r = tools["google_scholar"].execute({"query": ["a", "b"]})
    assert r.error and r.env_failures == ("server_error", "server_error")
    ex.close()


def test_one_of_two_queries_degraded_is_an_observation_with_one_env_failure(server, tmp_path):
    tools, ex = web(server, tmp_path)
    server.plan.script("serper", "ok", "500")
    server.plan.script("searxng", "500")
    r = tools["search"].execute({"query": ["first", "second"]})
    assert r.error is None and r.env_failures == ("server_error",)
    assert r.observation.count("Result 1 for") == 1 and "failed (serper: server_error" in r.observation
    ok = tools["search"].execute({"query": ["third"]})
    assert ok.error is None and ok.env_failures == ()
    ex.close()


def test_dead_page_is_not_an_env_failure_and_not_cached(server, tmp_path):
    tools, ex = web(server, tmp_path)
    url = f"{server.url}/gone/article"  # the reader answers 200 with a 404 warning, the site 404
    for n in (1, 2):
        r = tools["visit"].execute({"url": url, "goal": "anything"})
        assert r.error is None and r.env_failures == ()
        assert r.observation.startswith(f"Reading {url} failed (jina: target_error, the site answered HTTP 404")
        assert "not found" not in r.observation.split("failed (")[0]  # the error page is not the observation
        assert server.served[("jina", "ok")] == n and server.served[("page", "ok")] == n  # asked again: not cached
    assert len(ex.cache) == 0
    ex.close()


def test_reader_down_and_direct_fetch_ok_is_no_env_failure(server, tmp_path):
    server.plan.always["jina"] = "500"
    tools, ex = web(server, tmp_path, policy={"timeout_s": 10})
    r = tools["visit"].execute({"url": page(server, "Springfield"), "goal": "who founded it"})
    assert "Ada Example" in r.observation and r.env_failures == () and r.error is None
    ex.close()


def test_reader_down_and_the_site_slow_is_an_env_failure(server, tmp_path):
    server.plan.always.update(jina="500", page="hang")
    tools, ex = web(server, tmp_path, policy={"timeout_s": 0.5})
    r = tools["visit"].execute({"url": [page(server, "A"), f"{server.url}/gone/B"], "goal": "x"})
    assert r.env_failures == ("server_error",)  # A: the reader down, the site slow; B: a dead link
    assert r.observation.count("failed (jina: server_error, HTTP 500; direct:") == 2
    ex.close()


def test_downloads_fail_for_the_file_not_the_environment(server, tmp_path):
    with ToolExecutor({"parse_file": ToolPolicy(retries=0, timeout_s=2)}) as ex:
        fetch = executor_fetch(ex, allow_private=True)
        with pytest.raises(ToolUnavailableError) as e:
            fetch(f"{server.url}/file/missing.pdf")
        assert e.value.env_failures == () and "HTTP 404" in str(e.value)


# -- providers that cannot serve for the rest of the run --------------------------------------


def test_a_reader_out_of_balance_is_skipped_after_one_warning(server, tmp_path, caplog):
    server.plan.always["jina"] = "nocredit"
    tools, ex = web(server, tmp_path, policy={"timeout_s": 10})
    with caplog.at_level(logging.WARNING, logger="websailor.tools.web.executor"):
        for name in ("One", "Two", "Three"):
            r = tools["visit"].execute({"url": page(server, name), "goal": "founder"})
            assert "Ada Example" in r.observation and r.env_failures == ()
    assert server.served[("jina", "nocredit")] == 1  # asked once, then skipped
    warnings = [rec.getMessage() for rec in caplog.records if "cannot serve" in rec.getMessage()]
    assert len(warnings) == 1
    assert "visit: provider jina" in warnings[0] and "Account balance not enough" in warnings[0]
    s = ex.metrics.summary()["visit"]
    assert s["request_errors"] == {"unusable": 3} and s["retries"] == 0
    ex.close()


def test_serper_out_of_credit_fails_over_at_once_and_records_unusable(server, tmp_path, caplog):
    server.plan.always["serper"] = "nocredit"
    server.plan.always["searxng"] = "500"
    tools, ex = web(server, tmp_path)
    with caplog.at_level(logging.WARNING, logger="websailor.tools.web.executor"):
        first = tools["search"].execute({"query": ["one"]})
        later = tools["search"].execute({"query": ["two"]})
    assert "serper: unusable, HTTP 400: Not enough credits (check the account's credit)" in first.observation
    assert "serper: unusable, skipped for the rest of the run (HTTP 400: Not enough credits" in later.observation
    assert first.env_failures == later.env_failures == ("unusable",) and later.error
    assert server.served[("serper", "nocredit")] == 1
    assert sum("cannot serve" in rec.getMessage() for rec in caplog.records) == 1
    ex.close()


def test_a_refused_reader_key_is_unusable(server, tmp_path):
    server.plan.always["jina"] = "badkey"
    tools, ex = web(server, tmp_path, policy={"timeout_s": 10})
    r = tools["visit"].execute({"url": page(server, "Key"), "goal": "founder"})
    assert "Ada Example" in r.observation
    assert ex.unusable() == {("visit", "jina"): "HTTP 401: Authentication failed (check the API key and the plan)"}
    ex.close()


def test_account_answers_of_the_services_are_classified():
    async def answer(provider, status: int, body: str, request: dict):
        transport = httpx.MockTransport(lambda req: httpx.Response(status, text=body))
        async with httpx.AsyncClient(transport=transport) as client:
            return await provider(client, request, ToolPolicy())

    serper, jina = SerperSearch("k", "http://serper.test"), JinaReader("http://jina.test")
    cases = [
        (serper, 402, '{"message": "Payment required"}', "unusable"),
        (serper, 429, '{"message": "Monthly quota exceeded"}', "unusable"),
        (serper, 429, '{"message": "Too many requests"}', "rate_limited"),
        (serper, 400, '{"message": "Invalid query"}', "client_error"),
        (jina, 402, '{"code":402,"name":"InsufficientBalanceError","message":"no balance"}', "unusable"),
        (
            jina,
            403,
            '{"code":403,"name":"AbuseAlleviationError","message":"Anonymous access to domain x.com blocked"}',
            "auth",
        ),
        (
            jina,
            200,
            '{"data":null,"code":402,"name":"InsufficientBalanceError","status":40203,"message":"m"}',
            "unusable",
        ),
        (jina, 422, '{"code":422,"message":"Failed to goto"}', "client_error"),
    ]
    for provider, status, body, kind in cases:
        request = {"q": "x"} if provider is serper else {"url": "https://example.org/a"}
        with pytest.raises(ProviderFailure) as e:
            asyncio.run(answer(provider, status, body, request))
        assert e.value.kind == kind, (status, body)


def test_a_site_refusing_the_direct_fetch_is_the_targets_failure(server, tmp_path):
    server.plan.always.update(jina="500", page="badkey")  # the page route answers 403 to the direct fetch
    tools, ex = web(server, tmp_path)
    r = tools["visit"].execute({"url": page(server, "Private"), "goal": "x"})
    assert "direct: client_error, HTTP 403 (the site refuses access)" in r.observation and r.env_failures == ()
    assert ex.unusable() == {}
    ex.close()


# -- the Jina Reader's warnings ---------------------------------------------------------------


def reader_text(warning: str) -> str:
    return f"Title: T\n\nURL Source: https://example.org/a\n\n{warning}\n\nMarkdown Content:\nThe body text.\n"


@pytest.mark.parametrize(
    "warning,kind",
    [
        ("Warning: Target URL returned error 404: Not Found", "target_error"),
        ("Warning: Target URL returned error 503: Service Unavailable", "target_error"),
        ("Warning: This page maybe not yet fully loaded, consider explicitly specify a timeout.", None),
        ("Warning: This page maybe requiring CAPTCHA, please make sure you are authorized to access this page.", None),
    ],
)
def test_reader_warnings(warning, kind):
    async def read():
        transport = httpx.MockTransport(lambda req: httpx.Response(200, text=reader_text(warning)))
        async with httpx.AsyncClient(transport=transport) as client:
            return await JinaReader("http://jina.test")(client, {"url": "https://example.org/a"}, ToolPolicy())

    if kind is None:
        assert asyncio.run(read())["text"] == "The body text."
    else:
        with pytest.raises(ProviderFailure) as e:
            asyncio.run(read())
        assert e.value.kind == kind and not e.value.retryable


# -- SearXNG ----------------------------------------------------------------------------------


def searxng_only(server, tmp_path, **policy):
    return web(server, tmp_path, policy=policy or None, SERPER_API_KEY="")


def test_searxng_limiter_passes_our_headers_and_refuses_bare_requests(server, tmp_path):
    server.plan.limiter = True
    url = f"{server.url}/searxng/search"
    bare = httpx.get(url, params={"q": "x", "format": "json"})
    assert bare.status_code == 429 and bare.text == "Too Many Requests"
    json_only = httpx.get(
        url, params={"q": "x", "format": "json"}, headers={"Accept": "application/json", "Accept-Language": "en"}
    )
    assert json_only.status_code == 429
    ours = httpx.get(url, params={"q": "x", "format": "json"}, headers={**SEARXNG_HEADERS, "User-Agent": "websailor"})
    assert ours.status_code == 200 and ours.json()["results"]
    tools, ex = searxng_only(server, tmp_path)
    r = tools["search"].execute({"query": ["limited"]})
    assert "Result 1 for limited" in r.observation and r.error is None
    assert server.served[("searxng", "limited")] == 2
    ex.close()


def test_bot_detection_rules():
    good = {k.lower(): v for k, v in SEARXNG_HEADERS.items()} | {"user-agent": "websailor (research agent)"}
    assert bot_refusal(good) is None
    assert bot_refusal(good | {"accept": "*/*"}) is None  # werkzeug counts */* as accepting text/html
    assert "Accept did not contain text/html" in bot_refusal(good | {"accept": "application/json, text/html;q=0"})
    assert "Accept-Encoding" in bot_refusal(good | {"accept-encoding": "br"})
    assert "Accept-Language" in bot_refusal(good | {"accept-language": " "})
    assert "User-Agent" in bot_refusal(good | {"user-agent": "python-requests/2.31"})
    assert "User-Agent" in bot_refusal({k: v for k, v in good.items() if k != "user-agent"})


def test_unresponsive_engines_are_a_failure_and_not_cached(server, tmp_path):
    server.plan.always["searxng"] = "noengines"
    tools, ex = searxng_only(server, tmp_path)
    for n in (1, 2):
        r = tools["search"].execute({"query": ["blocked upstream"]})
        assert r.error and r.env_failures == ("upstream_unavailable",)
        assert "searxng: upstream_unavailable, no results, its engines did not answer: bing (Suspended: CAPTCHA)" in (
            r.observation
        )
        assert server.served[("searxng", "noengines")] == n  # the second call reached the server again
    ex.close()


def test_results_with_some_unresponsive_engines_are_results(server, tmp_path):
    server.plan.always["searxng"] = "fewengines"
    tools, ex = searxng_only(server, tmp_path)
    r = tools["search"].execute({"query": ["partly"]})
    assert "Result 1 for partly" in r.observation and r.error is None and r.env_failures == ()
    ex.close()


def test_empty_results_without_unresponsive_engines_are_no_results():
    async def search():
        body = '{"query": "zzz", "results": [], "unresponsive_engines": []}'
        transport = httpx.MockTransport(lambda req: httpx.Response(200, text=body))
        async with httpx.AsyncClient(transport=transport) as client:
            return await SearxngSearch("http://searx.test")(client, {"q": "zzz"}, ToolPolicy())

    assert asyncio.run(search()) == []


def test_searxng_without_the_json_format_says_so(server, tmp_path):
    server.plan.always["searxng"] = "jsonoff"
    tools, ex = searxng_only(server, tmp_path)
    r = tools["search"].execute({"query": ["formats"]})
    assert "searxng: unusable, HTTP 403: the instance does not serve the JSON format (add json to search.formats" in (
        r.observation
    )
    assert "API key" not in r.observation and r.env_failures == ("unusable",)
    ex.close()


# -- Serper as the Tongyi tools use it ---------------------------------------------------------


def test_serper_locale_follows_the_query_language(server, tmp_path):
    import json

    tools, ex = web(server, tmp_path)
    tools["search"].execute({"query": ["埃菲尔铁塔 高度"]})
    tools["search"].execute({"query": ["Eiffel tower height"]})
    tools["google_scholar"].execute({"query": ["图神经网络"]})
    bodies = [json.loads(body) for route, _, body in server.received if route == "serper"]
    assert {k: bodies[0][k] for k in ("location", "gl", "hl")} == {"location": "China", "gl": "cn", "hl": "zh-cn"}
    assert {k: bodies[1][k] for k in ("location", "gl", "hl")} == {"location": "United States", "gl": "us", "hl": "en"}
    assert "gl" not in bodies[2] and bodies[2]["q"] == "图神经网络"  # Tongyi's scholar sends the query alone
    assert query_locale("Tour Eiffel") == "en" and query_locale("巴黎") == "zh"
    assert tools["search"].cache_key("巴黎") == {"q": "巴黎", "locale": "zh"}
    assert tools["search"].cache_key("Paris") == {"q": "paris"}  # entries written before the locale stay valid
    ex.close()


def test_dates_sources_and_pdf_links_are_shown(server, tmp_path):
    server.plan.serper_extras = True
    tools, ex = web(server, tmp_path)
    r = tools["search"].execute({"query": ["news"]})
    assert (
        "2. [Result 2 for news](" + f"{server.url}/page/2-news)\nDate published: Mar 5, 2024\nSource: Example News\n"
        "Snippet 2 about news."
    ) in r.observation
    assert "4. [Result 4 for news]" in r.observation and "Date published: 2 days ago\nSnippet 4" in r.observation
    assert "1. [Result 1 for news](" + f"{server.url}/page/1-news)\nSnippet 1 about news." in r.observation
    s = tools["google_scholar"].execute({"query": ["papers"]})
    assert f"3. [Result 3 for papers]({server.url}/file/paper-3.pdf)" in s.observation
    ex.close()


def test_an_account_or_engine_fault_drawn_for_a_route_without_one_serves_it_as_usual():
    import httpx

    from websailor.tools.web.fault_server import FaultPlan, FaultServer

    with FaultServer(FaultPlan(rate=1.0, kinds=("noengines", "nocredit"))) as server:
        serper = httpx.post(f"{server.url}/search", json={"q": "nile"}, headers={"X-API-KEY": server.api_key})
        page = httpx.get(f"{server.url}/page/Nile")
        searxng = httpx.get(f"{server.url}/searxng/search", params={"q": "nile", "format": "json"})
    # serper has no engines to lose and a page no credit: both answer normally, whichever was drawn
    assert page.status_code == 200 and "Page Nile" in page.text
    assert serper.status_code in (200, 400)  # 400: nocredit drawn, Serper's real answer
    assert serper.status_code == 400 or serper.json()["organic"]
    assert searxng.status_code == 200  # noengines (empty results) or served as usual
