"""Fetch the pinned llama.cpp sources the rungs are built from, and record what each is.

The ladder's ``source`` is every rung's by default; a rung may pin another (``source``: another
version, commit or tree) and carry ``patches`` applied in order onto it. A patched tree is a
source of its own, content-addressed by its base's identity and the patches' sha256."""

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
from typing import Any, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, canonical_hash, download, sha256_file

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


def base_identity(source: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies an unpatched source; computed from config alone (cheap)."""
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


def source_identity(source: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies the source for build keys; computed from config alone (cheap). A
    patched source is its base's identity and each patch's name and sha256, in order."""
    base = base_identity(source)
    patches = source.get("patches") or []
    if not patches:
        return base
    return {**base, "patches": [{"name": p["name"], "sha256": p["sha256"],
                                 **({"strip": p["strip"]} if p.get("strip", 1) != 1 else {})}
                                for p in patches]}


def source_id(source: Mapping[str, Any]) -> str:
    return canonical_hash(source_identity(source), 16)


def base_of(source: Mapping[str, Any]) -> dict[str, Any]:
    """The source a patched source is patched onto (the source itself when unpatched)."""
    return {k: v for k, v in source.items() if k != "patches"}


PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent.parent


def patch_path(path: str) -> Path:
    """A patch file: an absolute path, else relative to the working directory, else to the
    ladder checkout (where the shipped examples' config/patches/ are)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return PROJECT_ROOT / p if (PROJECT_ROOT / p).exists() else p


def _patch_name(entry: Mapping[str, Any]) -> str:
    where = str(entry.get("path") or entry.get("url"))
    stem = where.rstrip("/").rsplit("/", 1)[-1]
    return str(entry.get("name") or re.sub(r"\.(patch|diff)$", "", stem))


def resolve_patches(entries: Sequence[Mapping[str, Any]], where: str) -> list[dict[str, Any]]:
    """A rung's ``patches`` with each one's name and sha256: a local file's sha256 is read now
    (editing it makes a new source), and must equal the one the config pins when it pins one;
    a URL's must be pinned (it is checked when the patch is fetched)."""
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        at = f"{where}.patches[{i}]"
        if bool(entry.get("path")) == bool(entry.get("url")):
            raise LadderError(f"{at}: give exactly one of path and url")
        pinned = entry.get("sha256")
        if entry.get("path"):
            path = patch_path(str(entry["path"]))
            if not path.is_file():
                raise LadderError(f"{at}.path: {entry['path']} is not a file (a relative path "
                                  f"is looked for in the working directory, {Path.cwd()}, then "
                                  f"in the ladder checkout, {PROJECT_ROOT})")
            got = sha256_file(path)
            if pinned and pinned != got:
                raise LadderError(f"{at}.sha256: {path} has sha256 {got}, the config pins "
                                  f"{pinned} (edited? pin the new one, or drop sha256 to follow "
                                  "the file)")
            out.append({"name": _patch_name(entry), "path": str(entry["path"]), "sha256": got,
                        "strip": int(entry.get("strip", 1))})
        else:
            if not pinned:
                raise LadderError(f"{at}.sha256: a patch fetched from a URL must pin its sha256")
            out.append({"name": _patch_name(entry), "url": str(entry["url"]), "sha256": pinned,
                        "strip": int(entry.get("strip", 1))})
    names = [p["name"] for p in out]
    if len(set(names)) != len(names):
        raise LadderError(f"{where}.patches: two patches are named alike ({names}); "
                          "give each a name")
    return out


def rung_source(config: Mapping[str, Any], entry: Mapping[str, Any],
                where: str) -> dict[str, Any] | None:
    """A rung's own source (its ``source``, else the ladder's, with its ``patches``), or None
    when the rung is built from the ladder's source as it is."""
    if not entry.get("source") and not entry.get("patches"):
        return None
    base = dict(entry.get("source") or config["source"])
    patches = resolve_patches(entry.get("patches") or [], where)
    return {**base, "patches": patches} if patches else base


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


def local_objects(url: str) -> Path | None:
    """The object store of a repository on this machine (a path or a file:// URL), or None
    (a remote URL, or a path that is no repository)."""
    path = url[len("file://"):] if url.startswith("file://") else url
    if "://" in path or not Path(path).is_dir():
        return None
    res = subprocess.run(["git", "-C", path, "rev-parse", "--path-format=absolute",
                          "--git-common-dir"], capture_output=True, text=True, check=False)
    objects = Path(res.stdout.strip()) / "objects" if res.returncode == 0 else None
    return objects if objects is not None and objects.is_dir() else None


def fetch_git(source: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    url, commit = source["url"], str(source["commit"]).lower()
    root = workdir / "tree"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    _git("init", "-q", str(root))
    _git("remote", "add", "origin", url, cwd=root)
    objects = local_objects(url) if shutil.which("git") else None
    if objects is not None and subprocess.run(
            ["git", "--git-dir", str(objects.parent), "cat-file", "-e", f"{commit}^{{commit}}"],
            capture_output=True, check=False).returncode == 0:
        # a repository on this machine that has the commit: its objects are borrowed (git's
        # alternates), not packed and copied (a depth-1 fetch of a llama.cpp tree from a local
        # path took ~11 s a source); the checkout below writes the same files
        (root / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    else:
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


def _patch_file(patch: Mapping[str, Any], downloads: Path) -> Path:
    """A patch's file, its sha256 checked (a URL's is downloaded once into ``downloads``)."""
    if patch.get("path"):
        path = patch_path(str(patch["path"]))
    else:
        path = downloads / "patches" / f"{patch['sha256'][:16]}-{patch['name']}.patch"
        if not path.is_file() or sha256_file(path) != patch["sha256"]:
            _download(str(patch["url"]), path)
    got = sha256_file(path)
    if got != patch["sha256"]:
        raise LadderError(f"patch {patch['name']}: {path} has sha256 {got}, the rung pins "
                          f"{patch['sha256']}")
    return path


_HUNK_FAILED = re.compile(r"^(?:patching file (.+)|Hunk #(\d+) FAILED at (\d+).*)$", re.M)


def rejected_hunks(output: str) -> list[str]:
    """'<file> hunk #N (line L)' for each hunk GNU patch rejected, from its output."""
    out, current = [], "?"
    for m in _HUNK_FAILED.finditer(output):
        if m.group(1):
            current = m.group(1).strip().strip("'")
        else:
            out.append(f"{current} hunk #{m.group(2)} (at line {m.group(3)})")
    return out


def apply_patches(root: Path, patches: Sequence[Mapping[str, Any]], downloads: Path
                  ) -> tuple[list[dict[str, Any]], str | None]:
    """Apply ``patches`` in order onto ``root`` with GNU patch, exactly (no fuzz; moved lines
    are fine and recorded). Returns what each did, and why the first that failed failed."""
    if shutil.which("patch") is None:
        raise LadderError("a rung's patches need GNU patch on PATH (apt-get install patch)")
    done: list[dict[str, Any]] = []
    for patch in patches:
        path = _patch_file(patch, downloads)
        res = subprocess.run(["patch", f"-p{patch.get('strip', 1)}", "--batch", "--forward",
                              "--fuzz=0", "--no-backup-if-mismatch", "-d", str(root), "-i",
                              str(path.resolve())], capture_output=True, text=True, check=False)
        output = (res.stdout + res.stderr).strip()
        rec = {"name": patch["name"], "sha256": patch["sha256"], "file": str(path),
               "returncode": res.returncode, "output": output[-4000:]}
        done.append(rec)
        if res.returncode != 0:
            hunks = rejected_hunks(output)
            detail = ("rejected " + ", ".join(hunks) if hunks
                      else " ".join(output.split())[-400:] or "no output")
            return done, (f"patch {patch['name']} ({patch['sha256'][:12]}) does not apply: "
                          f"{detail}")
    return done, None


def patched_label(base_label: str, commit: str | None, patches: Sequence[Mapping[str, Any]]
                  ) -> str:
    """'llama.cpp 0c1e570 + 1 patch (amx-tile-config, 1a2b3c4d5e6f)'."""
    what = ", ".join(f"{p['name']}, {p['sha256'][:12]}" for p in patches)
    n = len(patches)
    head = f"llama.cpp {commit[:7]}" if commit else base_label.split(";")[0]
    return f"{head} + {n} patch{'es' if n > 1 else ''} ({what})"


def fetch_patched(source: Mapping[str, Any], base_json: Path, workdir: Path, downloads: Path,
                  out_json: Path) -> None:
    """Copy the base source's tree and apply the rung's patches onto the copy. A patch that
    does not apply is recorded (status failed, the rejected file and hunk): the rung's build
    fails by name and the rest of the ladder still reports."""
    base = json.loads(Path(base_json).read_text())
    identity = source_identity(source)
    sid = source_id(source)
    if base.get("source_id") != source_id(base_of(source)):
        raise LadderError(f"source {sid}: its base record {base_json} is not the base it "
                          "names (stale target?)")
    tree = workdir / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(base["root"], tree, symlinks=True)
    applied, failed = apply_patches(tree, source["patches"], downloads)
    commit = base.get("upstream_commit")
    atomic_write_json(out_json, {
        "format": "ladder-source/1",
        "identity": identity,
        "source_id": sid,
        "status": "failed" if failed else "ok",
        "reason": failed,
        "root": str(tree.resolve()),
        "base": {k: base.get(k) for k in ("source_id", "label", "upstream_commit", "root")},
        # the patched tree is not the upstream commit: the commit it was patched from is
        # recorded as its base, never as the tree's own
        "upstream_commit": None,
        "upstream_commit_verified": False,
        "patched_from_commit": commit,
        "patches": applied,
        "label": patched_label(base.get("label") or "", commit, source["patches"]),
        "build_label": f"{(commit or 'src')[:7]}+p{sid[:4]}",
        "tree": tree_says(tree),
    })


def fetch(source: Mapping[str, Any], workdir: Path, downloads: Path, out_json: Path,
          base_json: Path | None = None) -> None:
    """Materialise the source and write its provenance (root path, verified upstream commit);
    a patched source is its base's tree copied and patched (``base_json``: the base's record)."""
    if source.get("patches"):
        if base_json is None:
            raise LadderError("a patched source needs its base source's record")
        fetch_patched(source, base_json, workdir, downloads, out_json)
        return
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
