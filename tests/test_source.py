"""Sources: a local git repository stands in for a git host; a file:// URL for PyPI."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from ladder.preparing import source
from ladder.core.errors import LadderError
from ladder.core.io import read_json


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path):
    repo = tmp_path / "upstream"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "CMakeLists.txt").write_text("project(fake)\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one", cwd=repo)
    first = git("rev-parse", "HEAD", cwd=repo)
    (repo / "NEWS").write_text("two\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two", cwd=repo)
    return repo, first


def test_git_source_checks_out_the_pinned_commit(upstream, tmp_path):
    repo, first = upstream
    cfg = {"kind": "git", "url": str(repo), "commit": first}
    out = tmp_path / "src" / "source.json"
    source.fetch(cfg, tmp_path / "src", tmp_path / "dl", out)
    doc = read_json(out)
    assert doc["upstream_commit"] == first and doc["upstream_commit_verified"]
    assert not (tmp_path / "src" / "tree" / "NEWS").exists()  # the older commit, not HEAD


def test_a_local_repository_lends_its_objects_instead_of_packing_them(upstream, tmp_path):
    """A repository on this machine (a path or a file:// URL: a bisect's history, a local
    checkout) is borrowed through git's alternates: nothing is packed and copied (a depth-1
    fetch of llama.cpp's tree from a local path took ~11 s a source in CI's bisects), the tree
    is the same commit's."""
    repo, first = upstream
    for i, url in enumerate((str(repo), f"file://{repo}")):
        work = tmp_path / f"src{i}"
        out = work / "source.json"
        source.fetch({"kind": "git", "url": url, "commit": first}, work, tmp_path / "dl", out)
        tree = work / "tree"
        assert read_json(out)["upstream_commit"] == first
        assert (tree / "CMakeLists.txt").exists() and not (tree / "NEWS").exists()
        alternates = tree / ".git" / "objects" / "info" / "alternates"
        assert alternates.read_text().strip() == str((repo / ".git" / "objects").resolve())
        assert not list((tree / ".git" / "objects" / "pack").glob("*.pack"))
    assert source.local_objects("https://github.com/ggml-org/llama.cpp") is None
    assert source.local_objects(str(tmp_path / "no-such-repo")) is None


def test_git_unknown_commit_is_a_named_error(upstream, tmp_path):
    repo, _ = upstream
    cfg = {"kind": "git", "url": str(repo), "commit": "f" * 40}
    with pytest.raises(LadderError, match="source: git"):
        source.fetch(cfg, tmp_path / "s", tmp_path / "dl", tmp_path / "s" / "source.json")


def test_git_short_sha_rejected():
    with pytest.raises(LadderError, match="source.commit: '0c1e570' is not a full"):
        source.source_identity({"kind": "git", "url": "x", "commit": "0c1e570"})


def _sdist(tmp_path, git_metadata=True):
    buf = io.BytesIO()
    files = {"pkg-1.0/vendor/llama.cpp/CMakeLists.txt": b"project(x)\n",
             "pkg-1.0/vendor/llama.cpp/ggml/CMakeLists.txt":
                 b"set(GGML_VERSION_MAJOR 0)\nset(GGML_VERSION_MINOR 9)\nset(GGML_VERSION_PATCH 4)\n"}
    if git_metadata:
        files["pkg-1.0/.git/modules/vendor/llama.cpp/HEAD"] = b"a" * 40 + b"\n"
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "pkg-1.0.tar.gz"
    path.write_bytes(buf.getvalue())
    return path, hashlib.sha256(buf.getvalue()).hexdigest()


def _fetch_sdist(tmp_path, monkeypatch, git_metadata=True):
    """An sdist claiming upstream commit a*40, fetched: its config and its source record."""
    archive, sha = _sdist(tmp_path, git_metadata)
    monkeypatch.setattr(source, "_pypi_sdist_url", lambda *a: archive.as_uri())
    cfg = {"kind": "pypi", "package": "pkg", "version": "1.0", "sha256": sha,
           "subdirectory": "vendor/llama.cpp", "upstream_commit": "a" * 40}
    out = tmp_path / "s" / "source.json"
    source.fetch(cfg, tmp_path / "s", tmp_path / "dl", out)
    return cfg, read_json(out)


def test_pypi_sdist_verified_and_commit_read(tmp_path, monkeypatch):
    cfg, doc = _fetch_sdist(tmp_path, monkeypatch)
    assert doc["upstream_commit"] == "a" * 40 and doc["upstream_commit_verified"]
    cfg["upstream_commit"] = "b" * 40
    with pytest.raises(LadderError, match="source.upstream_commit: the source says a+, config says b+"):
        source.fetch(cfg, tmp_path / "s2", tmp_path / "dl", tmp_path / "s2" / "source.json")


def test_a_commit_the_tree_cannot_show_is_never_named(tmp_path, monkeypatch):
    # issue 21, item 3: an overlay switched the source to another sdist (no git metadata) and
    # kept the default's upstream_commit; the record and the binaries then claimed that commit
    cfg, doc = _fetch_sdist(tmp_path, monkeypatch, git_metadata=False)
    sha = cfg["sha256"]
    assert doc["upstream_commit"] is None and doc["upstream_commit_verified"] is False
    assert doc["upstream_commit_claimed"] == "a" * 40
    assert doc["label"] == (f"PyPI sdist pkg==1.0 (sha256 {sha[:12]}…); "
                            "no verifiable upstream commit")
    assert doc["tree"] == {"ggml_version": "0.9.4"}
    assert doc["build_label"] == "src" + doc["source_id"][:4]  # stamped into the binaries


def test_pypi_wrong_sha256_is_named(tmp_path, monkeypatch):
    archive, sha = _sdist(tmp_path)
    monkeypatch.setattr(source, "_pypi_sdist_url", lambda *a: archive.as_uri())
    cfg = {"kind": "pypi", "package": "pkg", "version": "1.0", "sha256": "0" * 64}
    with pytest.raises(LadderError, match=f"source.sha256: the download has sha256 {sha}, "
                                          "config says 0+; kept aside as .*sha256-mismatch"):
        source.fetch(cfg, tmp_path / "s", tmp_path / "dl", tmp_path / "s" / "source.json")
    assert not list((tmp_path / "dl").glob("*.part"))
    assert list((tmp_path / "dl").glob("*.sha256-mismatch"))


def test_unreachable_index_is_named():
    with pytest.raises(LadderError, match="package index http://127.0.0.1:9 unreachable"):
        source._pypi_sdist_url("http://127.0.0.1:9", "pkg", "1.0", "0" * 64)


# --- patches: a rung's patched copy of a source ----------------------------------------------
PATCHES = Path(__file__).resolve().parent / "fixtures" / "patches"
GOOD = """--- a/src/k.c
+++ b/src/k.c
@@ -1,3 +1,3 @@
 int a;
-int b;
+int b_patched;
 int c;
"""


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("project(fake)\n")
    (root / "src" / "k.c").write_text("int a;\nint b;\nint c;\n")
    return root


def patch_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def fetch_patched(tmp_path, tree, patches):
    base_spec = {"kind": "path", "path": str(tree)}
    base_json = tmp_path / "base" / "source.json"
    source.fetch(base_spec, tmp_path / "base", tmp_path / "dl", base_json)
    spec = {**base_spec, "patches": source.resolve_patches(patches, "ladders.x.rungs[1]")}
    out = tmp_path / "patched" / "source.json"
    source.fetch(spec, tmp_path / "patched", tmp_path / "dl", out, base_json=base_json)
    return spec, read_json(out)


def test_a_patched_source_is_a_copy_with_the_patches_applied(tmp_path, tree):
    p = patch_file(tmp_path, "rename-b.patch", GOOD)
    spec, rec = fetch_patched(tmp_path, tree, [{"path": str(p)}])
    assert rec["status"] == "ok" and rec["reason"] is None
    root = Path(rec["root"])
    assert (root / "src" / "k.c").read_text() == "int a;\nint b_patched;\nint c;\n"
    assert (tree / "src" / "k.c").read_text() == "int a;\nint b;\nint c;\n"  # base untouched
    sha = hashlib.sha256(GOOD.encode()).hexdigest()
    assert rec["label"].endswith(f"+ 1 patch (rename-b, {sha[:12]})")
    assert rec["identity"]["patches"] == [{"name": "rename-b", "sha256": sha}]
    assert rec["source_id"] == source.source_id(spec) != source.source_id(source.base_of(spec))
    assert rec["upstream_commit"] is None  # a patched tree is no upstream commit
    assert rec["build_label"].startswith("src+p")


def test_a_patch_that_does_not_apply_is_named_with_its_file_and_hunk(tmp_path, tree):
    good = patch_file(tmp_path, "rename-b.patch", GOOD)
    bad = patch_file(tmp_path, "other.patch", GOOD.replace("int a;", "int z;"))
    _, rec = fetch_patched(tmp_path, tree, [{"path": str(good)}, {"path": str(bad)}])
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("patch other (")
    assert "rejected src/k.c hunk #1 (at line 1)" in rec["reason"], rec["reason"]
    assert [p["returncode"] for p in rec["patches"]] == [0, 1]  # in order, the first applied


def test_an_applied_patch_applied_again_is_named(tmp_path, tree):
    p = patch_file(tmp_path, "rename-b.patch", GOOD)
    again = patch_file(tmp_path, "again.patch", GOOD)
    _, rec = fetch_patched(tmp_path, tree, [{"path": str(p)}, {"path": str(again)}])
    assert rec["status"] == "failed" and "Reversed (or previously applied)" in rec["reason"]


def test_patch_entries_name_their_fault(tmp_path):
    p = patch_file(tmp_path, "x.patch", GOOD)
    where = "ladders.x86_64.rungs[3]"
    with pytest.raises(LadderError, match=r"rungs\[3\]\.patches\[0\]\.path: .*nope.patch"):
        source.resolve_patches([{"path": str(tmp_path / "nope.patch")}], where)
    with pytest.raises(LadderError, match=r"patches\[0\]\.sha256: .* pins 0000"):
        source.resolve_patches([{"path": str(p), "sha256": "0" * 64}], where)
    with pytest.raises(LadderError, match=r"patches\[0\]\.sha256: a patch fetched from a URL"):
        source.resolve_patches([{"url": "https://example.org/x.patch"}], where)
    with pytest.raises(LadderError, match="named alike"):
        source.resolve_patches([{"path": str(p)}, {"path": str(p)}], where)
    # editing the file is another source
    a = source.resolve_patches([{"path": str(p)}], where)
    p.write_text(GOOD + " ")
    b = source.resolve_patches([{"path": str(p)}], where)
    base = {"kind": "pypi", "package": "x", "version": "1", "sha256": "a" * 64}
    assert source.source_id({**base, "patches": a}) != source.source_id({**base, "patches": b})
    assert source.source_id(base) == source.source_id({**base, "patches": []})
    # another strip level applies the same file elsewhere: another source
    c = source.resolve_patches([{"path": str(p), "strip": 0}], where)
    assert source.source_id({**base, "patches": c}) != source.source_id({**base, "patches": b})


def test_shipped_patches_are_found_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = source.resolve_patches([{"path": "config/patches/amx-tile-config.patch"}], "r")
    assert got[0]["name"] == "amx-tile-config" and len(got[0]["sha256"]) == 64


def test_every_rejected_hunk_of_every_file_is_named(tmp_path, tree):
    """Real GNU patch output: of three hunks in one file the 1st and 3rd fail (their context
    is not there), the 2nd applies; a second file's hunk fails too."""
    lines = [f"int v{i};" for i in range(40)]
    (tree / "src" / "big.c").write_text("\n".join(lines) + "\n")
    (tree / "src" / "k.c").write_text("int a;\nint q;\nint c;\n")

    def hunk(at: int, old: str, new: str) -> str:
        return (f"@@ -{at},3 +{at},3 @@\n {lines[at - 2]}\n-{old}\n+{new}\n {lines[at]}\n")
    text = ("--- a/src/big.c\n+++ b/src/big.c\n" + hunk(3, "int nope;", "int x;")
            + hunk(20, lines[19], "int twenty;") + hunk(35, "int nope;", "int y;")
            + GOOD)
    p = patch_file(tmp_path, "three.patch", text)
    _, rec = fetch_patched(tmp_path, tree, [{"path": str(p)}])
    assert rec["status"] == "failed"
    assert "rejected src/big.c hunk #1 (at line 3), src/big.c hunk #3 (at line 35), " \
           "src/k.c hunk #1 (at line 1)" in rec["reason"], rec["reason"]
    assert "Hunk #2 succeeded" not in rec["reason"]
