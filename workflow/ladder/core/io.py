"""Atomic writes and hashing: nothing half-written is ever left where a result is expected."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

from ladder.core.errors import LadderError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would give; mkstemp alone gives 0600


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise LadderError(f"{p}: file not found") from exc
    except json.JSONDecodeError as exc:
        raise LadderError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def canonical_hash(obj: Any, length: int = 16) -> str:
    """Stable short hash of plain data (sorted keys), used for content-addressed paths."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def load_each(paths: Sequence[str], missing: list[dict[str, str]]) -> list[Any]:
    """Every readable JSON of ``paths``; an unreadable one is listed in ``missing`` (the report
    names it and goes on)."""
    docs = []
    for p in paths:
        try:
            docs.append(read_json(p))
        except LadderError as exc:
            missing.append({"file": str(p), "problem": str(exc)})
    return docs


def load_first(paths: Sequence[str], missing: list[dict[str, str]]) -> Any:
    """The first of ``paths`` (a rule input list of zero or one file), or None."""
    docs = load_each(list(paths)[:1], missing)
    return docs[0] if docs else None


def download(url: str, dest: str | os.PathLike[str], timeout_s: float = 120) -> None:
    """``url`` to ``dest`` through a ``.part`` file (never a partial file at ``dest``, no
    ``.part`` litter whatever stopped it); urllib's and the OS's errors are the caller's."""
    import shutil
    import urllib.request

    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp, open(tmp, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
