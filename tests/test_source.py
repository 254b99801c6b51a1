"""Sources: a local git repository stands in for a git host; a file:// URL for PyPI."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile

import pytest

from ladder import source
from ladder.errors import LadderError
from ladder.io import read_json


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
