"""Model backends behind one protocol, and model specs (``smollm2``, ``hf:PATH``,
``openai:MODEL@BASE_URL``)."""

from __future__ import annotations

from pathlib import Path

from websailor.errors import ConfigError
from websailor.log import get_logger
from websailor.models.base import ChatModel, Generation, Message, SamplingParams

logger = get_logger(__name__)

SPEC_HELP = (
    "smollm2 (the embedded default), hf:PATH (a local transformers directory), openai:MODEL@BASE_URL "
    "or vllm:NAME@BASE_URL (a vLLM server, token-exact: websailor serve model)"
)


def local_model_dir(spec: str) -> Path | None:
    """The local transformers directory behind ``smollm2`` (the embedded model, fetched once)
    or ``hf:PATH``; ``None`` for any other spec.

    Raises:
        ConfigError: an ``hf:`` path without ``config.json``.
        DownloadError: the embedded model could not be fetched.
    """
    spec = (spec or "").strip()
    if spec == "smollm2":
        from websailor.models.embedded import ensure_smollm2

        return ensure_smollm2()
    if spec.startswith("hf:"):
        path = Path(spec[3:]).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(f"model spec {spec!r}: {path} is not a transformers model directory (no config.json)")
        return path
    return None


def check_base_url(spec: str, base_url: str) -> None:
    """Refuse an ``openai:`` or ``vllm:`` base URL that cannot be requested (a bad port, no host).

    Raises:
        ConfigError: naming the spec and what is wrong.
    """
    import httpx

    try:
        parsed = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError) as e:
        raise ConfigError(f"model spec {spec!r}: the URL {base_url!r} is invalid ({e})") from None
    if not parsed.host:
        raise ConfigError(f"model spec {spec!r}: the URL {base_url!r} has no host; expected http(s)://HOST[:PORT]/v1")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise ConfigError(f"model spec {spec!r}: port {parsed.port} is out of range (1 to 65535)")


def load_model(spec: str, check: bool = False, **kwargs) -> ChatModel:
    """Build a backend from a spec string.

    Args:
        spec: one of the forms in :data:`SPEC_HELP`.
        check: for ``openai:`` and ``vllm:`` specs, check the endpoint now
            (:meth:`~websailor.models.openai_compat.OpenAIModel.check`: ``GET /models`` within a
            few seconds, and the served context length), as the commands do before their first
            rollout; other backends ignore it.
        kwargs: passed to the backend.

    Raises:
        ConfigError: the spec is not one of the forms in :data:`SPEC_HELP`, the path is not
            a model directory, or (``check``) the endpoint cannot serve the model.
        DownloadError: the embedded model could not be fetched.
    """
    spec = (spec or "").strip()
    path = local_model_dir(spec)
    if path is not None:
        from websailor.models.engine import supports
        from websailor.models.hf import TransformersModel, load_local

        name = "smollm2" if spec == "smollm2" else f"hf:{path}"
        model, tokenizer = load_local(path, kwargs.pop("device", "cpu"))
        if supports(model):
            return TransformersModel.from_loaded(model, tokenizer, name, **kwargs)
        from websailor.models.hf_static import StaticTransformersModel

        logger.info("%s: served by static generate (the engine holds full-attention caches only)", spec)
        return StaticTransformersModel.from_loaded(model, tokenizer, name, **kwargs)
    if spec.startswith("openai:"):
        from websailor.models.openai_compat import OpenAIModel

        model, sep, base_url = spec[len("openai:") :].rpartition("@")
        if not sep or not model or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"model spec {spec!r}: expected openai:MODEL@http(s)://HOST[:PORT]/v1")
        check_base_url(spec, base_url)
        return _checked(OpenAIModel(model, base_url, **kwargs), check)
    if spec.startswith("vllm:"):
        from websailor.models.vllm_server import VLLMServerModel, parse_spec

        name, base_url = parse_spec(spec)
        return _checked(VLLMServerModel(name, base_url, **kwargs), check)
    raise ConfigError(f"unknown model spec {spec!r}; use {SPEC_HELP}")


def _checked(chat: ChatModel, check: bool) -> ChatModel:
    """``chat`` after its start-up check when ``check`` (closed if the check fails)."""
    if check:
        try:
            chat.check()  # type: ignore[attr-defined]
        except BaseException:
            chat.close()
            raise
    return chat


def check_endpoint(spec: str | None) -> None:
    """Check the endpoint of an ``openai:`` spec (see :func:`load_model`'s ``check``), or of the
    model of an ``llm:`` judge spec; nothing for any other spec (or ``None``).

    Raises:
        ConfigError: the spec is malformed, or the endpoint cannot serve the model.
    """
    spec = (spec or "").strip()
    if spec.startswith("llm:"):
        spec = spec[4:].strip()
    if spec.startswith(("openai:", "vllm:")):
        load_model(spec, check=True).close()


__all__ = [
    "SPEC_HELP",
    "ChatModel",
    "Generation",
    "Message",
    "SamplingParams",
    "check_endpoint",
    "load_model",
    "local_model_dir",
]
