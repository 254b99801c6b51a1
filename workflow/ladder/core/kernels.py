"""Kernel families as data, resolved against the symbols of a built library.

A family is a set of regexes (Python ``re.search``) over the *demangled* function symbols of the
ggml CPU backend library (``workflow/data/kernel_families.yaml``, per arch):

- ``dispatch``: entered once per matmul op per thread (``ggml_compute_forward_mul_mat``, the
  extra-buffer ``tensor_traits::compute_forward``). Their exact counts give a phase's matmul
  shares.
- ``kernels``: the kernels inside (``ggml_gemv_*``, ``tinyBLAS::mnpack``, ``kai_run_*``): which
  code did the work. Per-row functions (``ggml_vec_dot_*``, millions of calls) never belong here.
- ``variants``: kernel regexes per ISA (KleidiAI's SME2/SME/SVE/I8MM/DOTPROD kernels), compared
  with the variant the build's init line advertised.

Symbols come from ``nm`` (the full symbol table, else the dynamic one); probe addresses are
placed with ``objdump`` past any VEX/EVEX-encoded first instruction (a uprobe there registers
but never fires) and inside the entry block, and converted to file offsets with the LOAD
segments from ``readelf``. Only symbols defined in the library itself are used, so a PLT stub
of the same name is never probed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from ladder.core.errors import LadderError

DATA_FILE = Path(__file__).resolve().parent.parent.parent / "data" / "kernel_families.yaml"
KINDS = ("dispatch", "kernels")


class SymbolsError(LadderError):
    """The library's symbols cannot be read (missing tool, stripped library)."""


@dataclass(frozen=True)
class Family:
    name: str
    dispatch: str | None = None
    kernels: str | None = None
    variants: Mapping[str, str] = field(default_factory=dict)
    buffer: str | None = None
    host_flags: tuple[str, ...] = ()
    description: str = ""
    show_flags: tuple[str, ...] = ()
    operands: Mapping[str, str] = field(default_factory=dict)
    shapes: Mapping[str, str] = field(default_factory=dict)
    sets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    sme_variants: tuple[str, ...] = ()
    time: str | None = None  # more symbols whose samples are the family's time (hotspots)

    def classify(self, symbol: str) -> dict[str, str | None]:
        """A kernel's operand (q4/q8/f32), shape (GEMM/GEMV) and ISA variant, by the family's
        own naming rules (None where a rule does not match: e.g. a packing kernel)."""
        def first(rules: Mapping[str, str]) -> str | None:
            return next((k for k, rx in rules.items() if re.search(rx, symbol)), None)
        return {"operand": first(self.operands), "shape": first(self.shapes),
                "variant": first(self.variants)}

    def patterns(self) -> dict[str, re.Pattern[str]]:
        return {k: re.compile(getattr(self, k)) for k in KINDS if getattr(self, k)}


@dataclass(frozen=True)
class TimeGroup:
    """Where sampled time goes outside the kernel families (hotspots): attention, activation
    quantization, threading, the OS kernel. Matched by symbol and/or shared object."""

    name: str
    description: str = ""
    symbols: str | None = None
    dso: str | None = None

    def matches(self, symbol: str, dso: str) -> bool:
        return bool((self.symbols and re.search(self.symbols, symbol))
                    or (self.dso and re.search(self.dso, dso)))


OTHER = "other"


@dataclass(frozen=True)
class FamilySet:
    arch: str
    library: str
    families: dict[str, Family]
    source: str
    time_groups: dict[str, TimeGroup] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Family:
        return self.families[name]

    def time_group_of(self, symbol: str, dso: str) -> str:
        """The family (first match, in file order, on its kernels, dispatch or time regex) or
        else the time group a sampled symbol's time belongs to; 'other' for the rest."""
        for f in self.families.values():
            if any(rx and re.search(rx, symbol) for rx in (f.kernels, f.dispatch, f.time)):
                return f.name
        for g in self.time_groups.values():
            if g.matches(symbol, dso):
                return g.name
        return OTHER

    def group_names(self) -> list[str]:
        return [*self.families, *self.time_groups, OTHER]


def load_families(arch: str, path: str | Path | None = None) -> FamilySet:
    """The families for one arch; every regex is compiled here so a bad one is named early."""
    p = Path(path) if path else DATA_FILE
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LadderError(f"kernel families file {p}: {exc}") from exc
    if not isinstance(data, dict) or arch not in data:
        raise LadderError(f"kernel families file {p}: no entry for arch {arch!r} "
                          f"(has {sorted(data) if isinstance(data, dict) else 'nothing'})")
    spec = data[arch]
    fams: dict[str, Family] = {}
    for name, f in (spec.get("families") or {}).items():
        unknown = set(f) - {"dispatch", "kernels", "variants", "buffer", "host_flags",
                            "description", "show_flags", "operands", "shapes", "sets",
                            "sme_variants", "time"}
        if unknown:
            raise LadderError(f"kernel families file {p}: {arch}.families.{name}: unknown keys "
                              f"{sorted(unknown)}")
        if not f.get("dispatch") and not f.get("kernels"):
            raise LadderError(f"kernel families file {p}: {arch}.families.{name} needs "
                              "'dispatch' or 'kernels'")
        regexes = {k: f.get(k) for k in (*KINDS, "time")}
        for group in ("variants", "operands", "shapes"):
            regexes.update({f"{group}.{v}": rx for v, rx in (f.get(group) or {}).items()})
        for set_name, shapes in (f.get("sets") or {}).items():
            bad = {v for v in shapes.values() if v not in (f.get("variants") or {})}
            if bad or set(shapes) - set(f.get("shapes") or {}):
                raise LadderError(f"kernel families file {p}: {arch}.families.{name}.sets."
                                  f"{set_name}: {dict(shapes)} names a variant or shape the "
                                  "family does not define")
        for key, rx in regexes.items():
            if rx is None:
                continue
            try:
                re.compile(rx)
            except re.error as exc:
                raise LadderError(f"kernel families file {p}: {arch}.families.{name}.{key}: "
                                  f"bad regex {rx!r}: {exc}") from exc
        fams[name] = Family(name=name, dispatch=f.get("dispatch"), kernels=f.get("kernels"),
                            variants=dict(f.get("variants") or {}), buffer=f.get("buffer"),
                            host_flags=tuple(f.get("host_flags") or ()),
                            description=f.get("description", ""),
                            show_flags=tuple(f.get("show_flags") or ()),
                            operands=dict(f.get("operands") or {}),
                            shapes=dict(f.get("shapes") or {}),
                            sets={k: dict(v) for k, v in (f.get("sets") or {}).items()},
                            sme_variants=tuple(f.get("sme_variants") or ()),
                            time=f.get("time"))
    groups: dict[str, TimeGroup] = {}
    for name, g in (spec.get("time_groups") or {}).items():
        unknown = set(g) - {"description", "symbols", "dso"}
        if unknown or not (g.get("symbols") or g.get("dso")):
            raise LadderError(f"kernel families file {p}: {arch}.time_groups.{name}: needs "
                              f"'symbols' and/or 'dso' (unknown keys: {sorted(unknown)})")
        if name in fams or name == OTHER:
            raise LadderError(f"kernel families file {p}: {arch}.time_groups.{name}: the name "
                              "is taken (a family's, or 'other')")
        for key in ("symbols", "dso"):
            try:
                re.compile(g.get(key) or "")
            except re.error as exc:
                raise LadderError(f"kernel families file {p}: {arch}.time_groups.{name}.{key}: "
                                  f"bad regex {g.get(key)!r}: {exc}") from exc
        groups[name] = TimeGroup(name=name, description=g.get("description", ""),
                                 symbols=g.get("symbols"), dso=g.get("dso"))
    return FamilySet(arch=arch, library=spec.get("library", "libggml-cpu.so"), families=fams,
                     source=str(p), time_groups=groups)


# --- symbols ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Symbol:
    addr: int
    name: str
    aliases: tuple[str, ...] = ()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SymbolsError(f"{name} not found on PATH (apt-get install binutils)")
    return path


def read_symbols(lib: str | Path) -> tuple[list[Symbol], str]:
    """Defined function symbols (demangled), one per address; and which table they came from."""
    nm = _tool("nm")
    for table, extra in (("symtab", []), ("dynsym", ["-D"])):
        res = subprocess.run([nm, "-C", "--defined-only", *extra, str(lib)], capture_output=True,
                             text=True, check=False)
        if res.returncode != 0 and "no symbols" not in res.stderr:
            raise SymbolsError(f"nm {lib}: {res.stderr.strip()[:300]}")
        by_addr: dict[int, list[str]] = {}
        for line in res.stdout.splitlines():
            parts = line.split(" ", 2)
            if len(parts) != 3 or parts[1] not in "tTwWiI" or not parts[0]:
                continue
            name = parts[2]
            if name.endswith("[clone .cold]"):  # a split-off fragment, not an entry point
                continue
            by_addr.setdefault(int(parts[0], 16), []).append(name)
        if by_addr:
            return [Symbol(a, names[0], tuple(names[1:])) for a, names in sorted(by_addr.items())], table
    raise SymbolsError(f"{lib}: no function symbols (stripped?): kernel families cannot be "
                       "resolved; rebuild without stripping (ggml exports its kernels by default)")


def match_families(fset: FamilySet, symbols: list[Symbol]) -> dict[str, dict[str, list[Symbol]]]:
    """family -> kind ('dispatch'/'kernels') -> matching symbols. A symbol joins the first
    family (in file order) whose regex matches it, so no hit is ever counted twice."""
    out: dict[str, dict[str, list[Symbol]]] = {f: {k: [] for k in KINDS} for f in fset.families}
    compiled = [(f.name, kind, rx) for f in fset.families.values()
                for kind, rx in f.patterns().items()]
    for sym in symbols:
        for fam, kind, rx in compiled:
            if any(rx.search(n) for n in (sym.name, *sym.aliases)):
                out[fam][kind].append(sym)
                break
    return out


def variant_of(family: Family, symbol_name: str) -> str | None:
    for variant, rx in family.variants.items():
        if re.search(rx, symbol_name):
            return variant
    return None


# --- probe placement ----------------------------------------------------------------------
VEX_EVEX_FIRST_BYTES = {"c4", "c5", "62"}
INSN = re.compile(r"^\s*(?P<addr>[0-9a-f]+):\t(?P<bytes>(?:[0-9a-f]{2} )+)\s*\t?(?P<text>.*)$")
BRANCH = re.compile(r"^(?:bnd |notrack )?(?:j[a-z]+|call|ret|jmp|loop[a-z]*|syscall|ud2|hlt)\b")


@dataclass(frozen=True)
class Placement:
    addr: int
    skipped: int  # VEX/EVEX instructions skipped at the entry
    instruction: str


def parse_objdump(text: str) -> list[tuple[int, list[str], str]]:
    out = []
    for line in text.splitlines():
        m = INSN.match(line)
        if m:
            out.append((int(m.group("addr"), 16), m.group("bytes").split(), m.group("text").strip()))
    return out


def choose_probe_insn(insns: list[tuple[int, list[str], str]]) -> Placement | None:
    """The first instruction of the entry block that is not VEX/EVEX encoded.

    Every instruction up to the entry block's first branch runs exactly once per call, so a
    probe there counts calls; a VEX/EVEX first instruction takes a uprobe silently (no error,
    no hit)."""
    skipped = 0
    for addr, raw, text in insns:
        if raw and raw[0] in VEX_EVEX_FIRST_BYTES:
            skipped += 1
            if BRANCH.match(text):
                return None
            continue
        return Placement(addr, skipped, text)
    return None


def place_probe(lib: str | Path, addr: int, window: int = 96) -> Placement | None:
    objdump = _tool("objdump")
    res = subprocess.run([objdump, "-d", "-w", f"--start-address={addr:#x}",
                          f"--stop-address={addr + window:#x}", str(lib)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SymbolsError(f"objdump {lib} at {addr:#x}: {res.stderr.strip()[:300]}")
    return choose_probe_insn(parse_objdump(res.stdout))


def load_segments(lib: str | Path) -> list[tuple[int, int, int]]:
    """(vaddr, memsz, file offset) of each LOAD segment."""
    res = subprocess.run([_tool("readelf"), "-lW", str(lib)], capture_output=True, text=True,
                         check=False)
    segs = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            segs.append((int(parts[2], 16), int(parts[5], 16), int(parts[1], 16)))
    if not segs:
        raise SymbolsError(f"readelf {lib}: no LOAD segments ({res.stderr.strip()[:200]})")
    return segs


def file_offset(segments: list[tuple[int, int, int]], addr: int) -> int:
    for vaddr, memsz, off in segments:
        if vaddr <= addr < vaddr + memsz:
            return addr - vaddr + off
    raise SymbolsError(f"address {addr:#x} is in no LOAD segment")


@dataclass
class Probe:
    id: str
    family: str
    kind: str  # dispatch | kernels
    symbol: str
    module: str
    entry: int
    addr: int | None  # the probed instruction (None: no probe-able instruction)
    offset: int | None  # its file offset (uprobes)
    skipped_vex: int = 0
    note: str | None = None
    variant: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def plan_probes(fset: FamilySet, lib: str | Path,
                place: bool = True) -> tuple[list[Probe], dict[str, Any]]:
    """Every family symbol of ``lib`` as a probe; and the per-family resolution summary.

    ``place=False`` (a guest binary counted by QEMU's exec log): probes sit at the symbol's
    entry address, which is where a call enters; no x86 disassembly, no file offsets."""
    lib = str(Path(lib).resolve())
    symbols, table = read_symbols(lib)
    matched = match_families(fset, symbols)
    segments = load_segments(lib) if place else []
    probes: list[Probe] = []
    summary: dict[str, Any] = {"library": lib, "symbol_table": table, "symbols": len(symbols),
                               "families": {}}
    for fam, kinds in matched.items():
        f = fset[fam]
        summary["families"][fam] = {
            kind: {"pattern": getattr(f, kind), "matched": len(kinds[kind])}
            for kind in KINDS if getattr(f, kind)
        }
        if f.variants:
            # a variant the compiler inlined has no symbol of its own: its calls are counted on
            # the symbol it was inlined into, and no count can name the variant in this build
            seen = {variant_of(f, s.name) for k in KINDS for s in kinds[k]}
            summary["families"][fam]["variants_without_symbols"] = sorted(
                v for v in f.variants if v not in seen)
        for kind in KINDS:
            for sym in kinds[kind]:
                pid = f"p{len(probes)}"
                if not place:
                    probes.append(Probe(pid, fam, kind, sym.name, lib, sym.addr, sym.addr, None,
                                        variant=variant_of(f, sym.name)))
                    continue
                pl = place_probe(lib, sym.addr)
                if pl is None:
                    probes.append(Probe(pid, fam, kind, sym.name, lib, sym.addr, None, None,
                                        note="no non-VEX instruction before the first branch"))
                    continue
                probes.append(Probe(pid, fam, kind, sym.name, lib, sym.addr, pl.addr,
                                    file_offset(segments, pl.addr), pl.skipped,
                                    variant=variant_of(f, sym.name)))
    return probes, summary
