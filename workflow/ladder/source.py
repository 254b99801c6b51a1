"""Fetch the one pinned llama.cpp source every rung is built from, and record what it is."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from ladder.errors import LadderError
from ladder.io import atomic_write_json, canonical_hash, download, sha256_file

SHA1 = re.compile(r"[0-9a-f]{40}")


def path_fingerprint(root: Path) -> str:
    """Cheap identity of a local tree: every file's relative path, size and mtime."""
    items = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in {".git", "build"})
        for fn in sorted(filenames):
            p = Path(dirpath, fn)
            try:
                st = p.stat()
            except OSError:
                continue
            items.append((str(p.relative_to(root)), st.st_size, st.st_mtime_ns))
    return canonical_hash(items, 32)


def source_identity(source: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies the source for build keys; computed from config alone (cheap)."""
    kind = source["kind"]
    if kind == "pypi":
        return {
            "kind": "pypi",
            "package": source["package"],
            "version": str(source["version"]),
            "sha256": source["sha256"],
            "subdirectory": source.get("subdirectory", ""),
        }
    if kind == "git":
        commit = str(source["commit"]).lower()
        if not SHA1.fullmatch(commit):
            raise LadderError(f"source.commit: {source['commit']!r} is not a full 40-hex commit SHA")
        return {"kind": "git", "commit": commit}
    if kind == "path":
        root = Path(source["path"]).expanduser()
        if not (root / "CMakeLists.txt").is_file():
            raise LadderError(f"source.path: {root} is not a llama.cpp tree (no CMakeLists.txt)")
        return {"kind": "path", "path": str(root.resolve()), "fingerprint": path_fingerprint(root)}
    raise LadderError(f"source.kind: {kind!r} is not one of git, pypi, path")


def source_id(source: Mapping[str, Any]) -> str:
    return canonical_hash(source_identity(source), 16)


def _pypi_sdist_url(index: str, package: str, version: str, sha256: str) -> str:
    """Find the sdist with this sha256 through the Simple API (PEP 691 JSON), pip's protocol."""
    url = f"{index.rstrip('/')}/{package}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            meta = json.load(resp)
    except urllib.error.HTTPError as exc:
        raise LadderError(
            f"source.package: {package} not found on {index} (HTTP {exc.code} for {url})"
        ) from exc
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise LadderError(f"source: package index {index} unreachable ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise LadderError(f"source.index: {url} did not answer with PEP 691 JSON") from exc
    files = meta.get("files", [])
    for f in files:
        if f.get("hashes", {}).get("sha256") == sha256:
            if not f["filename"].endswith((".tar.gz", ".zip")):
                raise LadderError(f"source.sha256: {sha256} is {f['filename']}, not an sdist")
            return urllib.parse.urljoin(url, str(f["url"]))
    prefix = f"{package.replace('-', '_').lower()}-{version}."
    sdists = [f"{f['filename']} ({f.get('hashes', {}).get('sha256')})" for f in files
              if f["filename"].lower().startswith(prefix) and f["filename"].endswith(".tar.gz")]
    raise LadderError(
        f"source.sha256: {sha256} matches no file of {package} on {index} "
        f"(sdists of {version}: {', '.join(sdists) or 'none'})"
    )


def _download(url: str, dest: Path) -> None:
    try:
        download(url, dest, 120)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise LadderError(f"source: download of {url} failed ({exc})") from exc


def fetch_pypi(source: Mapping[str, Any], workdir: Path, downloads: Path) -> dict[str, Any]:
    package, version, sha = source["package"], str(source["version"]), source["sha256"]
    archive = downloads / f"{package}-{version}.tar.gz"
    if not archive.exists() or sha256_file(archive) != sha:
        url = _pypi_sdist_url(source.get("index", "https://pypi.org/simple"), package, version, sha)
        _download(url, archive)
    got = sha256_file(archive)
    if got != sha:
        bad = archive.with_name(archive.name + ".sha256-mismatch")
        os.replace(archive, bad)
        raise LadderError(f"source.sha256: the download has sha256 {got}, config says {sha}; "
                          f"kept aside as {bad}, not used")
    extract = workdir / "tree"
    if extract.exists():
        shutil.rmtree(extract)
    with tarfile.open(archive) as tar:
        tar.extractall(extract, filter="data")
    tops = [p for p in extract.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise LadderError(f"source: {archive} does not unpack to one top directory")
    sub = source.get("subdirectory", "")
    root = tops[0] / sub if sub else tops[0]
    if not (root / "CMakeLists.txt").is_file():
        raise LadderError(
            f"source.subdirectory: {sub!r} inside {archive.name} is not a llama.cpp tree"
        )
    head = tops[0] / ".git" / "modules" / sub / "HEAD" if sub else tops[0] / ".git" / "HEAD"
    found = head.read_text().strip() if head.is_file() else None
    return {"root": str(root.resolve()), "upstream_commit_found": found,
            "archive": str(archive), "archive_sha256": got}


def _git(*args: str, cwd: Path | None = None) -> str:
    if shutil.which("git") is None:
        raise LadderError("source.kind git: 'git' is not on PATH (apt-get install git)")
    res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LadderError(f"source: git {' '.join(args)} failed: {res.stderr.strip()[-400:]}")
    return res.stdout.strip()


def fetch_git(source: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    url, commit = source["url"], str(source["commit"]).lower()
    root = workdir / "tree"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    _git("init", "-q", str(root))
    _git("remote", "add", "origin", url, cwd=root)
    try:
        _git("fetch", "-q", "--depth", "1", "origin", commit, cwd=root)
    except LadderError:
        # Servers that refuse fetch-by-SHA: take everything, then look for the commit.
        _git("fetch", "-q", "origin", "+refs/*:refs/remotes/origin/*", cwd=root)
    _git("checkout", "-q", "--detach", commit, cwd=root)
    head = _git("rev-parse", "HEAD", cwd=root)
    if head != commit:
        raise LadderError(f"source.commit: checked out {head}, expected {commit}")
    sub = source.get("subdirectory", "")
    tree = root / sub if sub else root
    return {"root": str(tree.resolve()), "upstream_commit_found": head, "url": url}


def fetch(source: Mapping[str, Any], workdir: Path, downloads: Path, out_json: Path) -> None:
    """Materialise the source and write its provenance (root path, verified upstream commit)."""
    identity = source_identity(source)
    kind = source["kind"]
    if kind == "pypi":
        info = fetch_pypi(source, workdir, downloads)
    elif kind == "git":
        info = fetch_git(source, workdir)
    else:
        root = Path(identity["path"])
        # a local checkout shows its commit; a plain tree shows none
        head = _git("rev-parse", "HEAD", cwd=root) if (root / ".git").exists() else None
        info = {"root": identity["path"], "upstream_commit_found": head}
    expected = source.get("upstream_commit") or (source.get("commit") if kind == "git" else None)
    found = info.get("upstream_commit_found")
    if expected and found and found.lower() != str(expected).lower():
        raise LadderError(
            f"source.upstream_commit: the source says {found}, config says {expected}"
        )
    source_id = canonical_hash(identity, 16)
    # A source names only the commit its own git metadata shows. A commit the config claims for
    # a tree without metadata (e.g. one kept by a config overlay that switched the source) is
    # recorded as a claim, never stamped into the binaries or the report as the commit.
    commit = found.lower() if found else None
    atomic_write_json(
        out_json,
        {
            "format": "ladder-source/1",
            "identity": identity,
            "source_id": source_id,
            "root": info["root"],
            "upstream_commit": commit,
            "upstream_commit_verified": commit is not None,
            "upstream_commit_claimed": None if commit else expected,
            "label": source_label(identity, commit),
            "build_label": commit[:7] if commit else f"src{source_id[:4]}",
            "tree": tree_says(Path(info["root"])),
            "details": {k: v for k, v in info.items() if k != "root"},
        },
    )


def source_label(identity: Mapping[str, Any], commit: str | None) -> str:
    """How the report names a source: its verified commit, else what identifies it."""
    if commit:
        return f"llama.cpp {commit[:12]} (verified from the source's git metadata)"
    kind = identity["kind"]
    if kind == "pypi":
        what = (f"PyPI sdist {identity['package']}=={identity['version']} "
                f"(sha256 {identity['sha256'][:12]}…)")
    elif kind == "path":
        what = f"local tree {identity['path']} (fingerprint {identity['fingerprint'][:12]})"
    else:
        what = f"{kind} source"
    return f"{what}; no verifiable upstream commit"


_GGML_VERSION = re.compile(r"set\(GGML_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)\)")


def tree_says(root: Path) -> dict[str, Any]:
    """What the tree itself says about its version, without git: ggml's version numbers."""
    try:
        text = (root / "ggml" / "CMakeLists.txt").read_text(errors="replace")
    except OSError:
        return {"ggml_version": None}
    parts = dict(_GGML_VERSION.findall(text))
    version = ".".join(parts[k] for k in ("MAJOR", "MINOR", "PATCH")) if len(parts) == 3 else None
    return {"ggml_version": version}
