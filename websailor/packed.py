"""Packed run files: large JSONL records published gzip-compressed, read as if they were not.

A published experiment keeps its rollouts and trajectories so that a reader can recompute every
figure, and they are large (one RL run's ``rollouts.jsonl`` was 13 MB; they compress about 8 to
12 times). :func:`pack` writes such a file as ``NAME.gz`` beside where ``NAME`` would be, and
:func:`unpacked` gives the readers that seek into a file (the viewer's indexes, ``compare``) a
plain copy: ``NAME`` itself when it is there, else ``NAME.gz`` decompressed once into
``$WEBSAILOR_HOME/cache/unpacked`` (a new copy when the packed file changes).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from pathlib import Path

from websailor.config import websailor_home
from websailor.errors import InputFormatError

#: The suffix of a packed file (``rollouts.jsonl.gz`` holds ``rollouts.jsonl``).
PACKED_SUFFIX = ".gz"
#: Each plain copy this process read, with the packed file it came from (:func:`named_sources`).
_SOURCES: dict[str, str] = {}


def packed_twin(path: Path) -> Path:
    """``path`` with :data:`PACKED_SUFFIX` added: where its packed form lives."""
    return path.with_name(path.name + PACKED_SUFFIX)


def exists(path: Path) -> bool:
    """Whether the file ``path`` is there, plain or packed (:func:`packed_twin`)."""
    return path.is_file() or packed_twin(path).is_file()


def pack(data: bytes) -> bytes:
    """``data`` gzip-compressed with no time stamp, so the same records pack to the same bytes
    (a publish run again changes no committed file)."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def unpacked(path: Path) -> Path:
    """A plain file holding ``path``'s records: ``path`` when it is a file or there is no packed
    twin (the caller reports a missing file as before), else the twin decompressed into the
    cache, keyed by the twin's absolute path, size and modification time (written to a
    temporary file and renamed, so a reader never sees half a copy).

    Raises:
        InputFormatError: the packed file is not gzip data or ends early (the message names it).
        OSError: the cache cannot be written.
    """
    twin = packed_twin(path)
    if path.is_file() or not twin.is_file():
        return path
    st = twin.stat()
    key = hashlib.sha256(f"{twin.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:20]
    target = websailor_home() / "cache" / "unpacked" / key / path.name
    _SOURCES[str(target)] = str(twin)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, gzip.open(twin, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp, target)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise InputFormatError(f"{twin} is not a whole gzip file ({e}): publish it again or remove it") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return target


def named_sources(message: str) -> str:
    """``message`` with the plain copies :func:`unpacked` made named by the packed files they
    came from (an error about ``line 2`` of a copy in the cache names ``run/x.jsonl.gz line 2``)."""
    for copy, source in _SOURCES.items():
        message = message.replace(copy, source)
    return message
