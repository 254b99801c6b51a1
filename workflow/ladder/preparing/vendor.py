"""Vendor-library sources: a rung's cmake FetchContent dependency (KleidiAI) as an input.

A rung names the dependencies it needs (``requires.fetchcontent``); ``vendor_sources`` in the
config says where each comes from:

- ``upstream``: ggml's own FetchContent download (the tag and checksum its CMakeLists pins, so
  the llama.cpp source id covers it). Needs the dependency's host (github.com).
- ``archive``: a local ``.tar.gz``/``.zip`` with a pinned sha256, unpacked once into the
  resources dir and handed to cmake as ``FETCHCONTENT_SOURCE_DIR_<NAME>``.
- ``dir``: a local unpacked folder with a pinned tree hash (``ladder vendor-hash DIR``).

The identity (kind and hash, never the path) is part of the build key of every rung that needs
it. Whether a source is usable is decided by the ``vendor_source`` job and recorded
(``vendor.json``); planning the DAG never opens a connection. A missing file, a hash mismatch or
an unreachable upstream is a status with a reason naming the key: the build that needs it is
recorded *not applicable* with that reason, and the rest of the ladder runs. Those are failures
of the moment, not facts about the identity (``ladder.core.outcome``): the next run checks the
source again, so a file put in place afterwards is used with no manual deletion.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import outcome
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, canonical_hash, read_json, sha256_file

FORMAT = "ladder-vendor/1"
KINDS = ("upstream", "archive", "dir")
# where ggml's FetchContent downloads each dependency from (checked by the job, not the plan)
UPSTREAM_HOSTS = {"kleidiai": "github.com"}


def spec_of(config: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    specs = config.get("vendor_sources") or {}
    if name not in specs:
        raise LadderError(f"{where}.requires.fetchcontent names {name!r}, which is not a key of "
                          f"vendor_sources ({', '.join(specs) or 'none'}): add "
                          f"vendor_sources.{name} (kind upstream, archive or dir)")
    return specs[name]


def identity(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """What the build key holds for this dependency: its kind and content hash, no path."""
    kind = spec.get("kind")
    where = f"vendor_sources.{name}"
    if kind not in KINDS:
        raise LadderError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "upstream":
        return {"name": name, "kind": "upstream"}
    for key in ("path", "sha256"):
        if not spec.get(key):
            raise LadderError(f"{where}.{key}: a {kind} source needs a {key}")
    out = {"name": name, "kind": kind, "sha256": str(spec["sha256"]).lower()}
    if spec.get("subdirectory"):
        out["subdirectory"] = str(spec["subdirectory"])
    return out


def vendor_id(name: str, spec: Mapping[str, Any]) -> str:
    return canonical_hash(identity(name, spec), 16)


def cmake_var(name: str) -> str:
    return f"FETCHCONTENT_SOURCE_DIR_{name.upper()}"


def tree_sha256(root: str | os.PathLike[str]) -> str:
    """A folder's content hash: every file's relative path and bytes, in sorted order (symlinks
    by their target text). ``.git`` is left out."""
    root = Path(root)
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for fn in sorted(filenames):
            p = Path(dirpath, fn)
            rel = p.relative_to(root).as_posix()
            digest.update(rel.encode() + b"\0")
            if p.is_symlink():
                digest.update(b"L" + os.readlink(p).encode())
            else:
                digest.update(b"F" + bytes.fromhex(sha256_file(p)))
    return digest.hexdigest()


def _reachable(host: str, port: int = 443, timeout: float = 5.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _unpack(archive: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    part = dest.with_name(dest.name + ".part")
    if part.exists():
        shutil.rmtree(part)
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(part)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(part, filter="data")
        os.replace(part, dest)
    finally:
        if part.exists():
            shutil.rmtree(part)


def fetch_vendor(name: str, spec: Mapping[str, Any], out_json: str | os.PathLike[str],
                 reachable: Any = _reachable) -> dict[str, Any]:
    """Check (and unpack) one vendor source; always writes the record, status 'ok' or
    'unavailable' with a reason that names the config key and the file at fault."""
    ident = identity(name, spec)
    where = f"vendor_sources.{name}"
    out_dir = Path(out_json).resolve().parent
    record: dict[str, Any] = {"format": FORMAT, "name": name, "identity": ident,
                              "vendor_id": canonical_hash(ident, 16), "kind": ident["kind"],
                              "status": "unavailable", "reason": None, "source_dir": None,
                              "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def done(**kw: Any) -> dict[str, Any]:
        record.update(kw)
        if record["status"] == "ok" or record.get("outcome") == "fact":
            record["outcome"] = "fact"
        else:  # an input not there (yet): checked again on the next run, never kept
            record["outcome"] = "moment"
            outcome.note(str(record["reason"]))
        atomic_write_json(out_json, record)
        return record

    kind = ident["kind"]
    if kind == "upstream":
        host = UPSTREAM_HOSTS.get(name.lower(), "github.com")
        record["upstream_host"] = host
        if not reachable(host):
            return done(reason=f"no {name} source: {host} is unreachable from this machine "
                        f"(checked by this job) and {where} is kind upstream; point it at a "
                        f"local archive or folder (kind archive/dir, with its sha256)")
        return done(status="ok", reason=None)
    path = Path(str(spec["path"])).expanduser()
    record["path"] = str(path)
    if not path.exists():
        return done(reason=f"no {name} source: {where}.path {path} does not exist")
    # the kind's own check: a file hashed as bytes, a folder by its tree hash
    is_kind, what, digest = ((path.is_file(), "a file (kind archive)", sha256_file)
                             if kind == "archive" else
                             (path.is_dir(), "a folder (kind dir)", tree_sha256))
    if not is_kind:
        return done(reason=f"no {name} source: {where}.path {path} is not {what}")
    got = digest(path)
    record["sha256_found"] = got
    if got != ident["sha256"]:
        hashed = f"{path} has sha256" if kind == "archive" else f"the tree hash of {path} is"
        return done(reason=f"no {name} source: {where}.sha256 pins {ident['sha256']}, but "
                    f"{hashed} {got}: not used")
    if kind == "archive":
        tree = out_dir / "tree"
        marker = out_dir / "tree.sha256"
        if not (tree.is_dir() and marker.is_file() and marker.read_text().strip() == got):
            marker.unlink(missing_ok=True)
            _unpack(path, tree)
            marker.write_text(got + "\n")
        tops = [p for p in tree.iterdir() if p.is_dir()]
        base = tops[0] if len(tops) == 1 and not ident.get("subdirectory") else tree
    else:
        base = path.resolve()
    src = base / ident["subdirectory"] if ident.get("subdirectory") else base
    if not (src / "CMakeLists.txt").is_file():
        # a fact of the pinned content (its sha256 matched): kept
        return done(reason=f"no {name} source: {src} has no CMakeLists.txt "
                    f"(set {where}.subdirectory to the folder that has it)", outcome="fact")
    return done(status="ok", source_dir=str(src.resolve()))


def check_records(paths: Sequence[str]) -> tuple[dict[str, str], str | None, list[dict[str, Any]]]:
    """(cmake defines, reason-if-unusable, the records) of a build's vendor records."""
    records = [read_json(p) for p in paths]
    defines: dict[str, str] = {}
    reasons = []
    for rec in records:
        if rec.get("status") != "ok":
            reasons.append(rec.get("reason") or f"no {rec.get('name')} source")
        elif rec.get("source_dir"):
            defines[cmake_var(rec["name"])] = rec["source_dir"]
    return defines, ("; ".join(reasons) or None), records


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ladder.vendor DIR``: the tree hash to pin for a kind-dir source."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: python -m ladder.vendor DIR  (prints the sha256 to pin for kind dir)",
              file=sys.stderr)
        return 2
    print(tree_sha256(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
