"""Models: sha256 and GGUF checks, and the Hugging Face path through an offline cache stand-in."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ladder import model
from ladder.errors import LadderError
from ladder.io import read_json


def tiny_gguf(path):
    """A real (tiny) GGUF written with the gguf library."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tensor("t", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_local_gguf_is_verified(tmp_path):
    src = tmp_path / "m.gguf"
    sha = tiny_gguf(src)
    dest, meta = tmp_path / "out" / "m.gguf", tmp_path / "out" / "m.json"
    model.fetch("m", {"kind": "path", "path": str(src), "sha256": sha, "quant": "Q8_0"},
                str(dest), str(meta), str(tmp_path / "site"))
    doc = read_json(meta)
    assert doc["sha256"] == sha and doc["gguf_file_type"] == "MOSTLY_Q8_0"
    assert doc["requantized"] is False


def test_sha_mismatch_is_named_and_file_not_used(tmp_path):
    src = tmp_path / "m.gguf"
    tiny_gguf(src)
    dest = tmp_path / "out" / "m.gguf"
    with pytest.raises(LadderError, match=r"models.m.sha256: .* config says 0+; file not used"):
        model.fetch("m", {"kind": "path", "path": str(src), "sha256": "0" * 64, "quant": "Q8_0"},
                    str(dest), str(tmp_path / "out" / "m.json"), str(tmp_path / "site"))
    assert not dest.exists()


def test_not_gguf_is_named(tmp_path):
    src = tmp_path / "model.bin"
    src.write_bytes(b"PK\x03\x04 not a gguf")
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    with pytest.raises(LadderError, match=r"models.m: .*model.gguf is not a GGUF file"):
        model.fetch("m", {"kind": "path", "path": str(src), "sha256": sha, "quant": "Q8_0"},
                    str(tmp_path / "o" / "model.gguf"), str(tmp_path / "o" / "m.json"),
                    str(tmp_path / "site"))


def test_missing_local_model_is_named(tmp_path):
    with pytest.raises(LadderError, match="models.m.path: .*nope.gguf does not exist"):
        model.fetch("m", {"kind": "path", "path": str(tmp_path / "nope.gguf"), "sha256": "0" * 64,
                          "quant": "Q8_0"}, str(tmp_path / "o.gguf"), str(tmp_path / "o.json"),
                    str(tmp_path / "site"))


def test_hf_offline_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache laid out as huggingface_hub lays it out."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo_dir = tmp_path / "hub" / "models--someone--tiny-GGUF"
    snap = repo_dir / "snapshots" / revision
    snap.mkdir(parents=True)
    sha = tiny_gguf(snap / "tiny.gguf")
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import importlib

    import huggingface_hub.constants as c

    importlib.reload(c)
    import huggingface_hub.file_download as fd

    importlib.reload(fd)
    import huggingface_hub

    importlib.reload(huggingface_hub)
    spec = {"kind": "hf", "repo": "someone/tiny-GGUF", "filename": "tiny.gguf",
            "revision": revision, "sha256": sha, "quant": "Q8_0"}
    dest, meta = tmp_path / "m" / "tiny.gguf", tmp_path / "m" / "tiny.json"
    model.fetch("tiny", spec, str(dest), str(meta), str(tmp_path / "site"))
    assert read_json(meta)["source"]["kind"] == "hf"
    # found present with the pinned hash: left untouched, and the meta JSON has the same bytes
    before, text = dest.stat().st_mtime_ns, meta.read_bytes()
    spec_elsewhere = {**spec, "filename": "other.gguf"}  # would fail if it were fetched
    model.fetch("tiny", spec_elsewhere, str(dest), str(meta), str(tmp_path / "site"))
    assert dest.stat().st_mtime_ns == before
    spec_elsewhere["filename"] = "tiny.gguf"
    meta.unlink()  # what Snakemake does to a declared output before its job reruns
    model.fetch("tiny", spec_elsewhere, str(dest), str(meta), str(tmp_path / "site"))
    assert meta.read_bytes() == text
    other = tmp_path / "n" / "tiny.gguf"
    with pytest.raises(LadderError, match="models.tiny: cannot fetch someone/tiny-GGUF/other.gguf"):
        model.fetch("tiny", {**spec, "filename": "other.gguf"}, str(other), str(meta),
                    str(tmp_path / "site"))
    assert not list(other.parent.glob("*.part")) if other.parent.exists() else True
