"""Loading a model directory's tokenizer the way every stage needs it: fast (offsets for the
loss mask and exact per-turn pieces), with a chat template and a pad token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from websailor.errors import ConfigError


def load_tokenizer(model_dir: Path) -> Any:
    """The fast tokenizer of ``model_dir``, with a chat template and a pad token (the EOS token
    when the tokenizer has none).

    Raises:
        ConfigError: no tokenizer files, a slow tokenizer, or no chat template.
    """
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    if not any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ConfigError(
            f"{model_dir} has no tokenizer (tokenizer.json or tokenizer_config.json): "
            "save the tokenizer beside the weights"
        )
    try:
        tok = AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # a broken config.json or tokenizer file: transformers raises several types
        raise ConfigError(f"{model_dir}: cannot load its tokenizer: {type(e).__name__}: {e}") from None
    if not getattr(tok, "is_fast", False):
        raise ConfigError(f"{model_dir}: a fast tokenizer (tokenizer.json) is needed for the loss mask")
    if not tok.chat_template:
        raise ConfigError(f"{model_dir}: the tokenizer has no chat template")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
