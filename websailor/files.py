"""File helpers shared by stages: checksums and manifests of built directories."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(root: Path, skip: tuple[str, ...] = ()) -> dict[str, dict]:
    """``{relative_path: {"size": bytes, "sha256": hex}}`` for every file under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in skip:
            out[rel] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    return out


def check_manifest(root: Path, files: dict[str, dict], hashes: bool) -> str | None:
    """First problem found comparing ``root`` with a :func:`manifest` (``None`` if it matches).
    Sizes are always compared; contents only when ``hashes``."""
    for rel, info in files.items():
        p = root / rel
        if not p.is_file():
            return f"{rel} is missing"
        if p.stat().st_size != info.get("size"):
            return f"{rel} has {p.stat().st_size} bytes, expected {info.get('size')}"
        if hashes and sha256_file(p) != info.get("sha256"):
            return f"{rel} does not match its checksum"
    return None
