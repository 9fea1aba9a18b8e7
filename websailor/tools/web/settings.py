"""Settings of the real-web environment: provider keys and base URLs, the cache, and the
per-tool limits of the execution layer.

Values come from a YAML or JSON file (``--web-config`` or ``$WEBSAILOR_WEB_CONFIG``) and are
overridden by environment variables (:data:`ENV_VARS`). Keys are secrets: they are never
written to trajectories or logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError, field_validator

from websailor.config import websailor_home
from websailor.errors import ConfigError
from websailor.tools.web.executor import ToolPolicy

#: Environment variable -> setting.
ENV_VARS = {
    "SERPER_API_KEY": "serper_api_key",
    "SERPER_BASE_URL": "serper_base_url",
    "SEARXNG_BASE_URL": "searxng_base_url",
    "JINA_API_KEY": "jina_api_key",
    "JINA_BASE_URL": "jina_base_url",
    "WEBSAILOR_WEB_CACHE": "cache_path",
    "WEBSAILOR_WEB_ALLOW_PRIVATE": "allow_private_urls",
}
CONFIG_VAR = "WEBSAILOR_WEB_CONFIG"

#: Default limits per tool (the visit pipeline reads whole pages: fewer, slower operations).
DEFAULT_POLICIES = {
    "search": ToolPolicy(concurrency=16, qps=20, timeout_s=20),
    "google_scholar": ToolPolicy(concurrency=8, qps=10, timeout_s=20),
    "visit": ToolPolicy(concurrency=16, qps=10, timeout_s=60, max_bytes=10_000_000),
    "parse_file": ToolPolicy(concurrency=8, qps=10, timeout_s=60, max_bytes=20_000_000, cache_ttl_s=0),
}


class WebSettings(BaseModel):
    """Where the web tools go and how hard they try.

    Attributes:
        serper_api_key: Serper key (``SERPER_API_KEY``): primary search and scholar provider.
        serper_base_url: Serper's address (``SERPER_BASE_URL``).
        searxng_base_url: a SearXNG instance with the JSON API on (``SEARXNG_BASE_URL``):
            the backup search and scholar provider, or the only one.
        jina_api_key: Jina Reader key (``JINA_API_KEY``), optional.
        jina_base_url: the Jina Reader's address (``JINA_BASE_URL``).
        use_jina: read pages through the Jina Reader first; the direct fetch is the backup.
        direct_fetch: fetch pages directly (trafilatura) when the reader fails.
        cache_path: the SQLite result cache (``WEBSAILOR_WEB_CACHE``; default
            ``$WEBSAILOR_HOME/web_cache.sqlite``); ``cache: false`` turns it off.
        allow_private_urls: let ``visit`` and ``parse_file`` fetch loopback, private and
            link-local addresses (``WEBSAILOR_WEB_ALLOW_PRIVATE=1``); off by default, so the
            agent cannot reach the machine's own network or a cloud metadata service.
        policies: per-tool overrides of :class:`~websailor.tools.web.executor.ToolPolicy` fields.
    """

    model_config = ConfigDict(extra="forbid")

    serper_api_key: SecretStr | None = None
    serper_base_url: str = "https://google.serper.dev"
    searxng_base_url: str | None = None
    jina_api_key: SecretStr | None = None
    jina_base_url: str = "https://r.jina.ai"
    use_jina: bool = True
    direct_fetch: bool = True
    cache: bool = True
    cache_path: Path | None = None
    allow_private_urls: bool = False
    policies: dict[str, dict[str, Any]] = {}

    @field_validator("serper_base_url", "jina_base_url", "searxng_base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        from urllib.parse import urlsplit

        if v is not None:
            v = v.strip()
            if not v.startswith(("http://", "https://")):
                raise ValueError(f"must start with http:// or https://, got {v[:200]!r}")
            if not urlsplit(v).hostname:
                raise ValueError(f"has no host: {v[:200]!r}")
        return v

    @field_validator("serper_api_key", "jina_api_key", mode="before")
    @classmethod
    def _clean_key(cls, v: Any) -> Any:
        """Keys go into HTTP headers: surrounding blanks are dropped, an empty key counts as
        unset, and anything but printable ASCII is refused (without echoing the key)."""
        if v is None:
            return None
        if not isinstance(v, str):
            raise ValueError("must be a string")
        v = v.strip()
        if not v:
            return None
        if not all(33 <= ord(c) < 127 for c in v):
            raise ValueError("must be printable ASCII without spaces (the key itself is not shown)")
        return v

    @field_validator("policies")
    @classmethod
    def _known_policy_fields(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        fields = set(ToolPolicy.__dataclass_fields__)
        for tool, overrides in v.items():
            if tool not in DEFAULT_POLICIES:
                raise ValueError(f"no web tool {tool!r} has a policy; the tools are {', '.join(DEFAULT_POLICIES)}")
            unknown = sorted(set(overrides) - fields)
            if unknown:
                raise ValueError(f"{tool}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
        return v

    def policy(self, tool: str) -> ToolPolicy:
        """The tool's defaults with this file's overrides.

        Raises:
            ConfigError: an override of the wrong type or out of range.
        """
        from pydantic import TypeAdapter

        base = DEFAULT_POLICIES.get(tool, ToolPolicy())
        booleans = sorted(k for k, v in self.policies.get(tool, {}).items() if isinstance(v, bool))
        if booleans:
            raise ConfigError(f"web settings, policies.{tool}: {', '.join(booleans)} must be a number, not true/false")
        merged = {**base.__dict__, **self.policies.get(tool, {})}
        try:
            policy = TypeAdapter(ToolPolicy).validate_python(merged)
        except ValidationError as e:
            raise ConfigError(
                f"web settings, policies.{tool}: {e.errors()[0]['msg']} ({'.'.join(map(str, e.errors()[0]['loc']))})"
            ) from None
        import math

        numbers = {k: v for k, v in policy.__dict__.items()}
        bad = [k for k, v in numbers.items() if isinstance(v, bool) or not math.isfinite(v) or v < 0]
        if bad or policy.concurrency < 1 or policy.timeout_s <= 0 or policy.max_bytes < 1:
            raise ConfigError(
                f"web settings, policies.{tool}: every field must be a finite number, none negative; "
                f"concurrency and max_bytes at least 1, timeout_s above 0"
                + (f" (check {', '.join(bad)})" if bad else "")
            )
        return policy

    def resolved_cache_path(self) -> Path:
        """The cache file: ``cache_path`` with ``~`` expanded, else under ``$WEBSAILOR_HOME``."""
        return self.cache_path.expanduser() if self.cache_path else websailor_home() / "web_cache.sqlite"

    def require_search(self, tool: str = "search") -> None:
        """Raises :class:`ConfigError` naming the variables when no search provider is set."""
        if self.serper_api_key is None and self.searxng_base_url is None:
            raise ConfigError(
                f"--env web: the {tool} tool has no provider: set SERPER_API_KEY (the Serper API, "
                "as the released Tongyi DeepResearch code) or SEARXNG_BASE_URL (a SearXNG instance "
                "with format=json enabled), in the environment or the web config file"
            )


def load_web_settings(config: str | Path | None = None, environ: Mapping[str, str] | None = None) -> WebSettings:
    """Settings from ``config`` (or ``$WEBSAILOR_WEB_CONFIG``), then environment variables.

    Raises:
        ConfigError: the file is missing, not YAML/JSON mapping, or holds a bad value (the
            message names the key).
    """
    import yaml

    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    from_var = not config and bool(environ.get(CONFIG_VAR))
    config = config or environ.get(CONFIG_VAR) or None
    path: Path | None = None
    if config is not None:
        path = Path(config)
        if not path.is_file():
            named = f" (named by ${CONFIG_VAR})" if from_var else ""
            raise ConfigError(f"web config {path}{named} does not exist or is not a file")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"web config {path}: not YAML or JSON ({str(e).splitlines()[0]})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"web config {path}: expected a mapping of settings, got {type(loaded).__name__}")
        values.update(loaded or {})
    for var, key in ENV_VARS.items():
        if environ.get(var, "").strip():
            values[key] = environ[var].strip()
    try:
        return WebSettings(**values)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(map(str, err["loc"]))
        var = next((v for v, k in ENV_VARS.items() if k == err["loc"][0]), None)
        source = f" (from {var} or the config file)" if var else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown setting; the settings are {', '.join(WebSettings.model_fields)}"
        in_file = f" ({path})" if path is not None else ""
        raise ConfigError(f"web settings{in_file}: {where}{source}: {msg}") from None
