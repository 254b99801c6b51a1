"""Rungs, recipes and build keys: which binary each rung is, and whether this host can run it.

A *recipe* is everything that changes a binary (source identity, cmake defines, compiler flags,
compiler and version, the resolved native target, targets). Its hash is the *build key*: two
rungs with the same recipe share one build, and switching a recipe back finds the old build.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ladder.preparing import vendor
from ladder.core.errors import LadderError
from ladder.core.io import canonical_hash
from ladder.core.machine import compiler_identity, host_arch, host_cpu_flags, native_target
from ladder.core.markers import Marker
from ladder.preparing.source import rung_source

BUILD_KEY_VERSION = 2
# Applies Recipe.cpu_cflags to the ggml-cpu target only (see the file's own comment).
GGML_CPU_FLAGS_CMAKE = Path(__file__).resolve().parent.parent.parent / "cmake" / "ggml_cpu_flags.cmake"


@lru_cache(maxsize=None)
def _cpu_flags_include() -> str:
    return hashlib.sha256(GGML_CPU_FLAGS_CMAKE.read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class Runtime:
    env: Mapping[str, str] = field(default_factory=dict)
    repack: bool = True
    bench_args: tuple[str, ...] = ()
    common_args: tuple[str, ...] = ()

    def bench_argv(self) -> list[str]:
        return ([] if self.repack else ["--repack", "0"]) + list(self.bench_args)

    def common_argv(self) -> list[str]:
        return ([] if self.repack else ["--no-repack"]) + list(self.common_args)

    def as_dict(self) -> dict[str, Any]:
        return {
            "env": dict(sorted(self.env.items())),
            "repack": self.repack,
            "bench_args": list(self.bench_args),
            "common_args": list(self.common_args),
        }


@dataclass(frozen=True)
class Recipe:
    cmake: Mapping[str, str]
    cflags: tuple[str, ...]
    targets: tuple[str, ...]
    build_type: str
    cpu_cflags: tuple[str, ...] = ()
    # a CMake toolchain file of workflow/cmake/ (cross builds: the emulated aarch64 lane)
    toolchain: str | None = None
    # FetchContent dependencies (name, identity) from vendor_sources: kind and hash, no path
    vendor: tuple[tuple[str, str], ...] = ()
    # the rung's own llama.cpp source (JSON: another version, commit or tree, and its patches),
    # None for the ladder's source; the build key holds its identity (build_key_material)
    source: str | None = None

    @property
    def source_spec(self) -> dict[str, Any] | None:
        return json.loads(self.source) if self.source else None

    @property
    def native(self) -> bool:
        return str(self.cmake.get("GGML_NATIVE", "")).upper() in {"ON", "1", "TRUE", "YES"}

    def as_dict(self) -> dict[str, Any]:
        out = {
            "cmake": dict(sorted(self.cmake.items())),
            "cflags": list(self.cflags),
            "cpu_cflags": list(self.cpu_cflags),
            "targets": sorted(self.targets),
            "build_type": self.build_type,
        }
        if self.toolchain:  # only when set: native build keys stay what they were
            out["toolchain"] = self.toolchain
        if self.vendor:  # likewise: only rungs with a vendor dependency
            out["vendor"] = {name: json.loads(ident) for name, ident in self.vendor}
        return out


@dataclass(frozen=True)
class Rung:
    name: str
    label: str
    adds: str
    recipe: Recipe
    runtime: Runtime
    requires_arch: str | None
    requires_cpu_flags: tuple[str, ...]
    requires_fetchcontent: tuple[str, ...]
    markers: tuple[Marker, ...]
    twin_of: str | None = None
    family: str | None = None
    negative_controls: tuple[str, ...] = ()

    @property
    def mechanisms(self) -> list[str]:
        return sorted({m.mechanism for m in self.markers if not m.absent})


def _cmake_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise LadderError(f"cmake define {key}: value {value!r} is not a string, number or boolean")


def _vendor(entry: Mapping[str, Any], config: Mapping[str, Any] | None,
            where: str) -> tuple[tuple[str, str], ...]:
    names = ((entry.get("requires") or {}).get("fetchcontent") or [])
    if not names or config is None:
        return ()
    return tuple((n, json.dumps(vendor.identity(n, vendor.spec_of(config, n, where)),
                                sort_keys=True)) for n in names)


def _recipe(entry: Mapping[str, Any], build_cfg: Mapping[str, Any], where: str,
            config: Mapping[str, Any] | None = None) -> Recipe:
    cmake: dict[str, str] = {}
    for key, value in {**build_cfg.get("common_cmake", {}), **entry.get("cmake", {})}.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise LadderError(f"{where}.cmake: {key!r} is not a valid cmake variable name")
        cmake[key] = _cmake_value(key, value)
    return Recipe(
        cmake=cmake,
        cflags=tuple(str(f) for f in entry.get("cflags", [])),
        targets=tuple(build_cfg["targets"]),
        build_type=str(build_cfg.get("build_type", "Release")),
        cpu_cflags=tuple(str(f) for f in entry.get("cpu_cflags", [])),
        vendor=_vendor(entry, config, where),
        source=_source(entry, config, where),
    )


def _source(entry: Mapping[str, Any], config: Mapping[str, Any] | None,
            where: str) -> str | None:
    spec = rung_source(config, entry, where) if config is not None else None
    return json.dumps(spec, sort_keys=True) if spec else None


def _runtime(entry: Mapping[str, Any]) -> Runtime:
    rt = entry.get("runtime", {}) or {}
    return Runtime(
        env={str(k): str(v) for k, v in (rt.get("env") or {}).items()},
        repack=bool(rt.get("repack", True)),
        bench_args=tuple(str(a) for a in rt.get("bench_args", [])),
        common_args=tuple(str(a) for a in rt.get("common_args", [])),
    )


def _markers(entry: Mapping[str, Any]) -> tuple[Marker, ...]:
    out = []
    for m in entry.get("markers", []):
        out.append(
            Marker(
                mechanism=m["mechanism"],
                buffer=m.get("buffer"),
                feature=m.get("feature"),
                log=m.get("log"),
                absent=bool(m.get("absent", False)),
            )
        )
    return tuple(out)


def select_ladder_name(config: Mapping[str, Any], arch: str | None = None) -> str:
    wanted = config.get("ladder", "auto")
    ladders = config["ladders"]
    if wanted == "auto":
        arch = arch or host_arch()
        if arch not in ladders:
            raise LadderError(
                f"ladder: auto found no ladder for host arch {arch!r}; config.ladders has "
                f"{sorted(ladders)}: set 'ladder' to one of them"
            )
        return arch
    if wanted not in ladders:
        raise LadderError(f"ladder: {wanted!r} is not a key of config.ladders ({sorted(ladders)})")
    return str(wanted)


def rungs_from_config(config: Mapping[str, Any], ladder_name: str | None = None) -> list[Rung]:
    """The selected ladder's rungs in order, the control rung last."""
    name = ladder_name or select_ladder_name(config)
    ladder = config["ladders"][name]
    build_cfg = config["build"]
    rungs: list[Rung] = []
    seen: set[str] = set()
    for i, entry in enumerate(ladder["rungs"]):
        where = f"ladders.{name}.rungs[{i}]"
        rname = entry["name"]
        if rname in seen:
            raise LadderError(f"{where}.name: rung {rname!r} appears twice")
        seen.add(rname)
        req = entry.get("requires", {}) or {}
        rungs.append(
            Rung(
                name=rname,
                label=entry.get("label", rname),
                adds=entry.get("adds", ""),
                recipe=_recipe(entry, build_cfg, where, config),
                runtime=_runtime(entry),
                requires_arch=req.get("arch"),
                requires_cpu_flags=tuple(req.get("cpu_flags", [])),
                requires_fetchcontent=tuple(req.get("fetchcontent", [])),
                markers=_markers(entry),
                family=entry.get("family"),
                negative_controls=tuple(str(q).lower() for q in
                                        entry.get("negative_controls") or ()),
            )
        )
    control = ladder.get("control")
    if control:
        twin = next((r for r in rungs if r.name == control["twin"]), None)
        if twin is None:
            raise LadderError(
                f"ladders.{name}.control.twin: {control['twin']!r} is not a rung of this ladder"
            )
        if control["name"] in seen:
            raise LadderError(f"ladders.{name}.control.name: {control['name']!r} is already a rung")
        rungs.append(
            Rung(
                name=control["name"],
                label=f"{twin.label} (control twin)",
                adds="nothing: the same build as its twin, measured under a second label",
                recipe=twin.recipe,
                runtime=twin.runtime,
                requires_arch=twin.requires_arch,
                requires_cpu_flags=twin.requires_cpu_flags,
                requires_fetchcontent=twin.requires_fetchcontent,
                markers=twin.markers,
                twin_of=twin.name,
                family=twin.family,
            )
        )
    return rungs


def quantizer_recipe(config: Mapping[str, Any], ladder_name: str) -> Recipe:
    ladder = config["ladders"][ladder_name]
    return _recipe(ladder["quantizer"], config["build"], f"ladders.{ladder_name}.quantizer")


def build_key_material(recipe: Recipe, source_id: str,
                       facts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything that changes the binary; its hash is the build key.

    ``facts`` are the building host's facts (read on that node by its host_facts job); without
    them, this machine's. A native recipe is keyed by what -march/-mcpu=native expands to there.
    """
    compiler = facts["compiler"] if facts else compiler_identity()
    native = (facts["native_target"] if facts else native_target()) if recipe.native else None
    material = {
        "build_key_version": BUILD_KEY_VERSION,
        "source_id": source_id,
        "arch": facts["arch"] if facts else host_arch(),
        "recipe": recipe.as_dict(),
        "compiler": compiler,
        "native_target": native,
        "cpu_flags_include": _cpu_flags_include() if recipe.cpu_cflags else None,
    }
    if recipe.toolchain:
        material["toolchain_file"] = {"name": recipe.toolchain,
                                      "sha256": toolchain_file_hash(recipe.toolchain)}
    return material


def toolchain_file_path(name: str) -> Path:
    path = GGML_CPU_FLAGS_CMAKE.parent / name
    if not path.is_file():
        raise LadderError(f"toolchain file {name!r} not found in {path.parent}")
    return path


def toolchain_file_hash(name: str) -> str:
    return hashlib.sha256(toolchain_file_path(name).read_bytes()).hexdigest()[:16]


def build_key(recipe: Recipe, source_id: str, facts: Mapping[str, Any] | None = None) -> str:
    """Hash of everything that changes the binary; equal recipes share one build."""
    return canonical_hash(build_key_material(recipe, source_id, facts), 16)


# --- applicability ---------------------------------------------------------------------------


def not_applicable_reason(
    rung: Rung,
    arch: str | None = None,
    cpu_flags: frozenset[str] | None = None,
) -> str | None:
    """Why this host cannot run this rung, or None when it can: its arch and CPU flags only.
    Whether a vendor source is usable is decided by its vendor_source job (ladder.vendor) and
    recorded, never probed while the DAG is planned."""
    arch = arch or host_arch()
    flags = host_cpu_flags() if cpu_flags is None else cpu_flags
    if rung.requires_arch and rung.requires_arch != arch:
        return f"requires a {rung.requires_arch} host; this host is {arch}"
    missing = [f for f in rung.requires_cpu_flags if f not in flags]
    if missing:
        return f"host CPU lacks {', '.join(missing)}"
    return None
