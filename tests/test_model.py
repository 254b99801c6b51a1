"""Models: sha256 and GGUF checks, and the Hugging Face path through an offline cache stand-in."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ladder.preparing import model
from ladder.core.errors import LadderError
from ladder.core.io import read_json


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


def spm_gguf(path, n_vocab=300, n_layers=3, per_block=False):
    """A small GGUF shaped like a SentencePiece llama-family model: three special tokens, the
    256 byte tokens (ids 3-258), a Q8_0 token embedding (rows independent blocks) and ``n_layers``
    blocks of two tensors each."""
    import gguf
    from gguf.quants import quantize

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(n_layers)
    w.add_embedding_length(32)
    if per_block:
        w.add_head_count([4] * n_layers)
    w.add_tokenizer_model("llama")
    tokens = ["<pad>", "<eos>", "<bos>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"piece{i}" for i in range(n_vocab - len(tokens))]
    types = [3, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    w.add_token_list(tokens)
    w.add_token_scores([float(-i) for i in range(n_vocab)])
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((n_vocab, 32)).astype(np.float32)
    w.add_tensor("token_embd.weight", quantize(emb, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    for b in range(n_layers):
        for t in ("attn_q", "ffn_up"):
            w.add_tensor(f"blk.{b}.{t}.weight", rng.standard_normal((32, 32)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_cut_model_keeps_the_first_tokens_and_blocks_byte_for_byte(tmp_path):
    import gguf

    src, dest = tmp_path / "m.gguf", tmp_path / "cut.gguf"
    spm_gguf(src, n_vocab=400, n_layers=3)
    model.cut_model(src, dest, vocab=300, layers=2, where="models.c")
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dest))
    assert b.fields["llama.block_count"].contents() == 2
    assert b.fields["tokenizer.ggml.tokens"].contents() == a.fields[
        "tokenizer.ggml.tokens"].contents()[:300]
    assert len(b.fields["tokenizer.ggml.scores"].contents()) == 300
    assert len(b.fields["tokenizer.ggml.token_type"].contents()) == 300
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    assert set(tb) == set(ta) - {"blk.2.attn_q.weight", "blk.2.ffn_up.weight"}
    emb = tb["token_embd.weight"]
    assert emb.tensor_type == gguf.GGMLQuantizationType.Q8_0 and list(emb.shape) == [32, 300]
    assert emb.data.tobytes() == ta["token_embd.weight"].data[:300].tobytes()
    assert tb["blk.1.ffn_up.weight"].data.tobytes() == ta["blk.1.ffn_up.weight"].data.tobytes()
    # every other key is copied; the same cut gives the same bytes (its sha256 can be pinned)
    assert set(b.fields) == set(a.fields)
    again = tmp_path / "again.gguf"
    model.cut_model(src, again, vocab=300, layers=2, where="models.c")
    assert again.read_bytes() == dest.read_bytes()


@pytest.mark.parametrize("kwargs, message", [
    ({"vocab": 200}, r"models.c.vocab: 200 cuts the byte-fallback tokens \(the last is 258\)"),
    ({"vocab": 500}, r"models.c.vocab: 500 is not below the model's 400 tokens"),
    ({"layers": 3}, r"models.c.layers: 3 is not below the model's 3 blocks"),
])
def test_a_cut_that_would_break_the_model_is_named(tmp_path, kwargs, message):
    src = tmp_path / "m.gguf"
    spm_gguf(src, n_vocab=400)
    with pytest.raises(LadderError, match=message):
        model.cut_model(src, tmp_path / "o.gguf", kwargs.get("vocab"), kwargs.get("layers"),
                        "models.c")
    assert not (tmp_path / "o.gguf").exists() and not list(tmp_path.glob("*.part"))


def test_blocks_with_per_block_settings_are_not_cut(tmp_path):
    src = tmp_path / "m.gguf"
    spm_gguf(src, per_block=True)
    with pytest.raises(LadderError, match=r"models.c.layers: .*per-block settings "
                                          r"\(llama.attention.head_count\)"):
        model.cut_model(src, tmp_path / "o.gguf", None, 2, "models.c")


def test_a_cut_model_is_fetched_from_its_parent_and_says_so(tmp_path):
    src = tmp_path / "m.gguf"
    sha = spm_gguf(src, n_vocab=400)
    parent = {"kind": "path", "path": str(src), "sha256": sha, "quant": "Q8_0"}
    pmeta = tmp_path / "p" / "base.json"
    model.fetch("m", parent, str(tmp_path / "p" / "m.gguf"), str(pmeta), str(tmp_path / "s"))
    expect = tmp_path / "expect.gguf"
    model.cut_model(src, expect, 300, None, "x")
    spec = {"kind": "cut", "from": "m", "vocab": 300, "quant": "Q8_0",
            "sha256": hashlib.sha256(expect.read_bytes()).hexdigest()}
    meta = tmp_path / "c" / "base.json"
    model.fetch("c", spec, str(tmp_path / "c" / "c.gguf"), str(meta), str(tmp_path / "s"),
                parent_meta=str(pmeta))
    doc = read_json(meta)
    assert doc["cut"] == {"from": "m", "vocab": 300, "layers": None}
    assert doc["source"]["kind"] == "cut"
    # a wrong pin is named with the sha256 the cut gave, and the file is not used
    with pytest.raises(LadderError, match=r"models.c.sha256: .* has sha256 [0-9a-f]{64}, config"):
        model.fetch("c", {**spec, "sha256": "0" * 64}, str(tmp_path / "d" / "c.gguf"),
                    str(tmp_path / "d" / "c.json"), str(tmp_path / "s"), parent_meta=str(pmeta))


@pytest.mark.parametrize("models, emulation, message", [
    ({"c": {"kind": "cut", "from": "x", "quant": "Q8_0"}}, {},
     r"models.c.from: 'x' is not a model of this config"),
    ({"c": {"kind": "cut", "from": "m", "quant": "Q4_0"}}, {},
     r"models.c.quant: 'Q4_0', but a cut keeps the tensors of 'm', which is 'Q8_0'"),
    ({"c": {"kind": "cut", "from": "c2", "quant": "Q8_0"},
      "c2": {"kind": "cut", "from": "m", "quant": "Q8_0"}}, {},
     r"models.c.from: 'c2' is itself cut"),
    ({}, {"models": ["nope"]}, r"emulation.models: \['nope'\] not models of this config"),
])
def test_cut_and_emulated_models_are_checked_at_start(models, emulation, message):
    config = {"models": {"m": {"kind": "path", "quant": "Q8_0"}, **models},
              "emulation": emulation}
    with pytest.raises(LadderError, match=message):
        model.check_models(config)
