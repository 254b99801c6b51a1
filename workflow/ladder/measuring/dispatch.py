"""The dispatch ledger: which kernel family executed, per rung x quant x workload x threads.

Three evidence levels per cell:
  L1  what the host offers (/proc/cpuinfo flags the family needs),
  L2  what the build advertises (the rung's evidence run: weight buffers, compiled features,
      vendor init lines),
  L3  what executed: per-symbol hit counts (uprobes; or lldb counting of dispatch-level
      symbols plus first-hit presence of kernels), taken on a llama-bench run of one phase.

A rung's throughput gain is credited to its mechanism only when its cell says DISPATCHED or
HYBRID ("no marker, no claim" carried down to what ran).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, cast

from ladder.core import progress
from ladder.core.machine import host_brief
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.measuring.counting import Method, QemuExecMethod, choose_method, open_method
from ladder.preparing.emulation import bench_order, ran_order
from ladder.core.kernels import (
    KINDS,
    Family,
    FamilySet,
    Probe,
    SymbolsError,
    load_families,
    plan_probes,
)
from ladder.core.machine import host_arch, host_cpu_flags
from ladder.core.run import diagnose_crash

log = logging.getLogger("ladder.dispatch")
FORMAT = "ladder-dispatch/1"
LEDGER_FORMAT = "ladder-ledger/1"
CREDITED = {"DISPATCHED", "HYBRID"}


# --- verdicts (pure) ------------------------------------------------------------------------
def family_totals(probes: Sequence[Mapping[str, Any]], hits: Mapping[str, int]
                  ) -> dict[str, dict[str, int]]:
    """family -> {'dispatch': hits, 'kernels': hits}; and per variant under 'variants'."""
    out: dict[str, Any] = {}
    for p in probes:
        n = int(hits.get(p["id"], 0))
        fam = out.setdefault(p["family"], {"dispatch": 0, "kernels": 0, "variants": {}})
        fam[p["kind"]] += n
        if p.get("variant"):
            fam["variants"][p["variant"]] = fam["variants"].get(p["variant"], 0) + n
    return out


def judge_cell(*, expected: Family | None, families: FamilySet,
               resolution: Mapping[str, Any], totals: Mapping[str, Mapping[str, Any]],
               advertised: bool, advertised_variant: str | None = None,
               crash: Mapping[str, Any] | None = None, unmeasured: str | None = None,
               exact: bool = True, vendor: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The cell's verdict, its share of the phase's matmul dispatches, and why."""
    def out(verdict: str, detail: str, share: float | None = None) -> dict[str, Any]:
        return {"verdict": verdict, "share": share, "detail": detail}

    if unmeasured:
        return out("NOT_APPLICABLE" if unmeasured.startswith("not applicable:") else
                   "UNMEASURED", unmeasured)
    if expected is None:
        return out("NOT_APPLICABLE", "the rung declares no kernel family (recipe key 'family')")
    res = resolution.get(expected.name, {})
    kinds = {k: res[k] for k in KINDS if k in res}  # beside them: variants_without_symbols
    matched = {k: v.get("matched", 0) for k, v in kinds.items()}
    if not any(matched.values()):
        pats = ", ".join(f"{k} {v.get('pattern')!r}" for k, v in kinds.items())
        return out("NO_SYMBOLS", f"family {expected.name}: no symbol of the library matches "
                   f"({pats}): whether it ran cannot be told")
    kind = "dispatch" if matched.get("dispatch") else "kernels"
    engaged = int(totals.get(expected.name, {}).get(kind, 0))
    others = {f: int(t.get("dispatch", 0)) for f, t in totals.items()
              if f != expected.name and t.get("dispatch")}
    total = engaged + sum(others.values())
    share = engaged / total if total else None
    ran = ", ".join(f"{f} {n}" for f, n in sorted(others.items())) or "nothing else"
    if crash:
        sig = crash.get("signal") or "a signal"
        where = f" in {crash['symbol']}" if crash.get("symbol") else ""
        return out("CRASHED", f"killed by {sig}{where}; before it: {expected.name} {engaged}, "
                   f"{ran}", share)
    if engaged == 0:
        if advertised:
            return out("SILENT_FALLBACK", f"advertised ({expected.buffer or 'compiled'}), but no "
                       f"{expected.name} {kind} call executed; ran instead: {ran}", share)
        return out("NOT_APPLICABLE", f"the build placed no weights in {expected.buffer} for "
                   f"this quant (L2): nothing for {expected.name} to run; ran: {ran}", share)
    variants = totals.get(expected.name, {}).get("variants") or {}
    if vendor is not None:  # the family's own selection rules (KleidiAI's kernel sets)
        how = _vendor_text(vendor)
        if vendor["mismatches"]:
            return out("SILENT_FALLBACK", "; ".join(vendor["mismatches"]) + f" (ran: {how})",
                       share)
        split = [f"{x['operand']} {x['shape']} split: {'/'.join(x['sme']['variants'])} on "
                 f"thread(s) {x['sme']['threads']} ({x['sme']['calls']} calls), "
                 f"{'/'.join(x['other']['variants'])} on {x['other']['threads']} "
                 f"({x['other']['calls']} calls)" for x in vendor["splits"]]
        if split or others:
            also = f"; also {ran}" if others else ""
            return out("HYBRID", f"{expected.name} {engaged} of {total} matmul dispatches"
                       f"{also}; " + "; ".join(split + [how]), share)
        return out("DISPATCHED", f"{expected.name} {engaged} {kind} calls, nothing else; {how}",
                   1.0)
    if advertised_variant and expected.variants:
        if variants.get(advertised_variant, 0) == 0 and any(variants.values()):
            ran_v = ", ".join(f"{v} {n}" for v, n in variants.items() if n)
            return out("SILENT_FALLBACK", f"init line advertised {advertised_variant} kernels, "
                       f"none executed; {expected.name} ran {ran_v}", share)
    inlined = list(res.get("variants_without_symbols") or [])
    by_variant = (" (kernels by variant: " + ", ".join(
        f"{v} {variants.get(v, 0)}" for v in expected.variants if v not in inlined) + ")") if (
        expected.variants and any(variants.values())) else ""
    if inlined:  # said, not hidden: those calls are in the symbol they were inlined into
        by_variant += (f"; variant(s) {', '.join(inlined)} inlined in this build (no symbol of "
                       "their own): not told apart")
    fallback = families.families.get(f"{expected.name}_generic")
    fb_hits = int(totals.get(fallback.name, {}).get("kernels", 0)) if fallback else 0
    unit = "calls" if exact else "first hits (presence only)"
    if not others and not fb_hits:
        return out("DISPATCHED", f"{expected.name} {engaged} {kind} {unit}, nothing else"
                   f"{by_variant}", 1.0)
    extra = f"; {fallback.name} kernels ran {fb_hits} times" if fb_hits and fallback else ""
    return out("HYBRID", f"{expected.name} {engaged} of {total} matmul dispatches; also {ran}"
               f"{extra}{by_variant}", share if exact else None)


def judge_vendor(family: Family, ran: Sequence[Mapping[str, Any]], primary: Mapping[str, str],
                 sme: Mapping[str, Any] | None, threads: int) -> dict[str, Any] | None:
    """A vendor family judged by its own selection rules (kernel_families.yaml: operands,
    shapes, sets): each matmul kernel that ran is expected to be its operand's kernel set's
    GEMM or GEMV kernel (the init line names the set), or, above the SME thread cap, the
    non-SME fallback set's. Returns the kernels with their roles, the mismatches, and the
    operand/shape pairs whose work was split between an SME and a non-SME kernel (HYBRID).

    ``ran``: {symbol, calls, threads: {guest thread: calls} or None}; None when the family has
    no selection rules."""
    if not family.sets:
        return None
    cap = (sme or {}).get("thread_cap")
    rows: list[dict[str, Any]] = []
    mismatches: list[str] = []
    for k in ran:
        c = family.classify(k["symbol"])
        if c["shape"] is None:  # a packing kernel: shown, not judged
            rows.append({**k, **c, "expected": None, "role": "packing"})
            continue
        p = primary.get(c["operand"] or "")
        expected = (family.sets.get(p) or {}).get(c["shape"]) if p else None
        if p is None:
            role = "unadvertised"
            mismatches.append(f"{c['operand'] or '?'} {c['shape']} {c['variant']} kernel ran, "
                              f"but the init line named no {c['operand'] or '?'} kernel set")
        elif c["variant"] == expected:
            role = "set" if c["variant"] == p else f"set (the {p} set's {c['shape']} kernel)"
        elif p in family.sme_variants and c["variant"] not in family.sme_variants:
            if cap is not None and threads > cap:
                role = f"fallback set above the SME thread cap ({cap})"
            else:
                role = "fallback"
                mismatches.append(f"{c['operand']} {c['shape']}: the {p} set was advertised and "
                                  f"{threads} thread(s) are within its SME thread cap "
                                  f"({cap}), yet the {c['variant']} kernel ran")
        else:
            role = "unexpected"
            mismatches.append(f"{c['operand']} {c['shape']}: {c['variant']} kernel ran where "
                              f"the {p} set's {c['shape']} kernel is {expected}")
        rows.append({**k, **c, "expected": expected, "role": role})
    splits = []
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["shape"] and r.get("calls"):
            by_pair.setdefault((r["operand"], r["shape"]), []).append(r)
    for (operand, shape), rs in sorted(by_pair.items(), key=lambda kv: str(kv[0])):
        sme_rows = [r for r in rs if r["variant"] in family.sme_variants]
        other = [r for r in rs if r["variant"] not in family.sme_variants]
        if sme_rows and other:
            def part(group: list[dict[str, Any]]) -> dict[str, Any]:
                ths = sorted({t for r in group for t in (r.get("threads") or {})})
                return {"variants": sorted({r["variant"] for r in group}),
                        "calls": sum(int(r["calls"]) for r in group), "threads": ths}
            a, b = part(sme_rows), part(other)
            total = a["calls"] + b["calls"]
            splits.append({"operand": operand, "shape": shape, "sme": a, "other": b,
                           "sme_share": round(a["calls"] / total, 4) if total else None})
    return {"kernels": rows, "mismatches": mismatches, "splits": splits,
            "primary": dict(primary), "sme": dict(sme) if sme else None,
            "sme_variants": list(family.sme_variants)}


def _vendor_text(v: Mapping[str, Any]) -> str:
    """One line: what ran per operand and shape, and how it fits the kernel sets."""
    seen: dict[str, list[str]] = {}
    for r in v["kernels"]:
        if r["shape"] and r.get("calls"):
            key = f"{r['operand']} {r['shape']}"
            role = "" if r["role"] == "set" else f" [{r['role']}]"
            seen.setdefault(key, []).append(f"{r['variant']} {r['calls']}{role}")
    return "; ".join(f"{k}: {', '.join(x)}" for k, x in seen.items()) or "no matmul kernel ran"


# --- one rung's sweep ----------------------------------------------------------------------
def workload_phase(spec: Mapping[str, Any]) -> str | None:
    """'prefill' (n_prompt only), 'decode' (n_gen only), or None for a mixed workload."""
    if spec.get("n_prompt") and not spec.get("n_gen") and not spec.get("n_depth"):
        return "prefill"
    if spec.get("n_gen") and not spec.get("n_prompt") and not spec.get("n_depth"):
        return "decode"
    return None


def workload_argv(bin_dir: Path, model: str, spec: Mapping[str, int], threads: int,
                  bench_argv: Sequence[str], verbose: bool = False) -> list[str]:
    """One llama-bench run of a phase; ``verbose`` keeps the library's init lines (a vendor
    library's kernel choice, judged against what this very run executed)."""
    return tests_argv(bin_dir, model, [spec.get("n_prompt", 0)], [spec.get("n_gen", 0)],
                      [threads], bench_argv, verbose)


def tests_argv(bin_dir: Path, model: str, n_prompts: Sequence[int], n_gens: Sequence[int],
               threads: Sequence[int], bench_argv: Sequence[str],
               verbose: bool = False) -> list[str]:
    """One llama-bench process running every listed test (0: none of that kind)."""
    def join(xs: Sequence[int]) -> str:
        return ",".join(str(x) for x in xs) or "0"

    return [str(bin_dir / "llama-bench"), "-m", model, "-p", join(n_prompts),
            "-n", join(n_gens), "-r", "1", "--no-warmup", "-t", join(threads),
            "-o", "json", *(["-v"] if verbose else []), *bench_argv]


@dataclass
class OneProcess:
    """Cells one llama-bench process runs: a rung's (or toggle's) cells of one quant, each a
    single-phase workload. Under QEMU the model load is most of a small cell's time, and one
    process translates the binary once."""

    key: tuple[str, str]  # (rung, quant)
    stem: str
    argv: list[str]
    tests: dict[Any, tuple[int, int, int]]  # cell key -> (n_prompt, n_gen, threads), in order
    checked: list[Any]  # the 1-thread cells the gdbstub counts again
    check_argv: list[str]
    env: dict[str, str]


def cell_key(cell: Sequence[Any]) -> tuple[str, str, str, int]:
    """(rung, quant, workload, threads) of a (quant, workload, spec, threads, rung) cell."""
    quant, workload, _, threads, r = cell
    return (r["name"], quant, workload, threads)


def one_process_groups(cells_spec: Sequence[tuple[Any, ...]], rung: Mapping[str, Any],
                       bin_dir: Path, models: Mapping[str, str], verbose: bool
                       ) -> list[OneProcess]:
    """The cells that can share a process: per (rung, quant), every workload a single phase
    with its own length (llama-bench runs each length once per thread count)."""
    by: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for cell in cells_spec:
        quant, _, spec, _, r = cell
        by.setdefault((r["name"], quant), []).append(cell)
    out = []
    for (name, quant), cells in by.items():
        phase = {cell_key(c): workload_phase(c[2]) for c in cells}
        prompts = sorted({c[2]["n_prompt"] for c in cells if phase[cell_key(c)] == "prefill"})
        gens = sorted({c[2]["n_gen"] for c in cells if phase[cell_key(c)] == "decode"})
        workloads = {c[1] for c in cells}
        threads = sorted({c[3] for c in cells})
        if (len(cells) < 2 or None in phase.values()
                or len(prompts) + len(gens) != len(workloads)
                or len(cells) != len(workloads) * len(threads)):
            continue
        r = cells[0][4]
        test_of = {cell_key(c): ((c[2]["n_prompt"], 0, c[3]) if phase[cell_key(c)] == "prefill"
                                 else (0, c[2]["n_gen"], c[3])) for c in cells}
        key_of = {t: k for k, t in test_of.items()}
        tests = {key_of[t]: t for t in bench_order(prompts, gens, threads)}
        bench = r.get("bench_argv") or []
        checked = [k for k in tests if k[3] == 1 and not r.get("variant_of")]
        prefix = "" if name == rung["name"] else f"{name}."
        out.append(OneProcess(
            key=(name, quant), stem=f"{prefix}{quant}.one-process", tests=tests,
            argv=tests_argv(bin_dir, models[quant], prompts, gens, threads, bench, verbose),
            checked=checked, env=dict(r.get("env") or {}),
            check_argv=tests_argv(bin_dir, models[quant], prompts, gens, [1], bench, verbose)))
    return out


def cell_stem(r: Mapping[str, Any], rung: Mapping[str, Any], quant: str, workload: str,
              threads: int) -> str:
    prefix = "" if r["name"] == rung["name"] else f"{r['name']}."
    return f"{prefix}{quant}.{workload}.t{threads}"


def _library(bin_dir: Path, fset: FamilySet) -> Path:
    lib = bin_dir / fset.library
    return lib if lib.exists() else bin_dir / "llama-bench"  # static builds: all in the tool


def instrumentation(build: Mapping[str, Any], fset: FamilySet, bin_dir: Path,
                    launcher: Sequence[str], settings: Mapping[str, Any], raw: Path,
                    doc: dict[str, Any]) -> tuple[list[Probe], Method | None, str | None]:
    """The probes on the rung's library and the method that counts them (uprobes, lldb, the
    QEMU exec log), recorded in ``doc``; or why the rung's cells cannot be measured."""
    unmeasured = None
    probes: list[Probe] = []
    if build.get("status") == "not_applicable":  # no usable vendor source (its job said why)
        unmeasured = f"not applicable: {build.get('reason')}"
    elif build.get("status") != "ok":
        unmeasured = f"build failed: {build.get('reason')}"
    else:
        try:
            probes, resolution = plan_probes(fset, _library(bin_dir, fset),
                                             place=not launcher)
            doc["resolution"] = resolution
            doc["probes"] = [p.as_dict() for p in probes]
        except SymbolsError as exc:
            unmeasured = str(exc)
    method: Method | None = None
    why = None
    if unmeasured is None:
        method, why = open_method(settings.get("method", "auto"), probes, list(launcher),
                                  str(bin_dir / "llama-bench"), str(raw),
                                  bool(settings.get("crosscheck", True)))
        if method is None:
            unmeasured = f"no instrumentation method: {why}"
    doc["method"] = method.name if method else None
    doc["method_note"] = why
    return probes, method, unmeasured


def sweep(*, rung: Mapping[str, Any], provenance: str, quants: Mapping[str, Mapping[str, str]],
          settings: Mapping[str, Any], threads: Sequence[int], out_json: str, raw_dir: str,
          families_file: str | None = None) -> dict[str, Any]:
    """Every (quant, workload, threads) cell of one rung, under one instrumentation session."""
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    guest = rung.get("guest") or None
    launcher = list(rung.get("launcher") or [])
    arch = guest["arch"] if guest else host_arch()
    fset = load_families(arch, families_file)
    family_name = rung.get("family")
    if family_name and family_name not in fset.families:
        raise LadderError(f"rung {rung['name']}: family {family_name!r} is not defined for "
                          f"{arch} in {fset.source} (has {sorted(fset.families)})")
    expected = fset.families.get(family_name) if family_name else None
    build = read_json(provenance)
    doc: dict[str, Any] = {"format": FORMAT, "ran_on": host_brief(guest), "rung": rung["name"], "family": family_name,
                           "build_key": rung["build_key"], "arch": arch, "families_file": fset.source,
                           "method": None, "method_note": None, "session": {}, "resolution": {},
                           "probes": [], "cells": []}
    host_flags = frozenset(guest["cpu_flags"]) if guest else host_cpu_flags()
    bin_dir = Path(build.get("bin_dir") or "")
    probes, method, unmeasured = instrumentation(build, fset, bin_dir, launcher, settings, raw,
                                                 doc)
    timeout = float(settings.get("timeout_s", 600))  # an emulated host's: its plan sets it
    verbose = bool(expected and expected.sets)
    # one job per rung as built, and one per runtime toggle of its binary (GGML_KLEIDIAI_SME=0:
    # which kernels run with the vendor path's option off; plan.dispatch_unit)
    runs = [dict(rung)]
    cells_spec = [(q, w, spec, t, r) for r in runs for q in quants
                  for w, spec in settings["workloads"].items() if spec for t in threads]
    inputs = {q: (read_json(m["model"]), read_json(m["evidence"]) if m.get("evidence") else {})
              for q, m in quants.items()}

    # Uninstrumented runs first: registered uprobes fire in every process mapping the library.
    baselines: dict[tuple[str, str, str, int], Any] = {}
    groups: dict[Any, OneProcess] = {}  # cell key -> the process it shares (QEMU only)
    counted: dict[Any, Any] = {}

    def plain_each(cells: Iterable[tuple[Any, ...]]) -> None:
        for cell in cells:
            quant, workload, spec, t, r = cell
            key = cell_key(cell)
            argv = workload_argv(bin_dir, inputs[quant][0]["path"], spec, t,
                                 r.get("bench_argv") or [], verbose)
            baselines[key] = cast(Method, method).plain(
                argv, r.get("env") or {}, raw / cell_stem(r, rung, quant, workload, t), key,
                timeout)

    if method is not None:
        if getattr(method, "marker", None) is not None:
            models = {q: v[0]["path"] for q, v in inputs.items()}
            for g in one_process_groups(cells_spec, rung, bin_dir, models, verbose):
                base = method.plain(g.argv, g.env, raw / g.stem, g.key, timeout)
                if base.ok and ran_order(base.stdout) == list(g.tests.values()):
                    groups.update({k: g for k in g.tests})
                    baselines.update({k: base for k in g.tests})
        plain_each(c for c in cells_spec if cell_key(c) not in groups)

    def seen_of(key: Any) -> Any:
        """A cell's counts from its shared process (run at its first cell); None for a cell
        counted alone (a shared run that failed makes its cells run alone)."""
        g = groups.get(key)
        if g is None or key in counted:
            return counted.get(key)
        # a shared process exists only where the method has a test marker (QEMU's)
        res = cast(QemuExecMethod, method).count_tests(
            g.argv, g.env, raw / g.stem, g.key, g.tests, timeout, g.checked, g.check_argv)
        if res is None:
            for k in g.tests:
                groups.pop(k, None)
            plain_each(c for c in cells_spec if cell_key(c) in g.tests)
            return None
        counted.update(res)
        return counted[key]

    def measure_all() -> None:
        for i, (quant, workload, spec, t, r) in enumerate(cells_spec):
            progress.step("cell", i + 1, len(cells_spec),
                          f"{'' if r is runs[0] else r['name'] + ' '}{quant} {workload} t{t}")
            key = cell_key((quant, workload, spec, t, r))
            seen = seen_of(key) if unmeasured is None else None
            doc["cells"].append(_cell(
                rung=r, stem=raw / cell_stem(r, rung, quant, workload, t), verbose=verbose,
                quant=quant, workload=workload, spec=spec, threads=t,
                model=inputs[quant][0], evidence=inputs[quant][1], fset=fset,
                expected=expected, resolution=doc["resolution"].get("families", {}),
                probes=probes, probe_dicts=doc["probes"], method=method,
                unmeasured=unmeasured, bin_dir=bin_dir, timeout=timeout,
                host_flags=host_flags, base=baselines.get(key), seen=seen))
            atomic_write_json(out_json + ".partial", doc)  # nothing measured is lost

    if method is None:
        measure_all()
    else:
        with method.session():
            measure_all()
        doc["session"] = dict(method.session_info)
    atomic_write_json(out_json, doc)
    try:
        os.remove(out_json + ".partial")
    except OSError:
        pass
    return doc


def _cell(*, rung: Mapping[str, Any], stem: Path, verbose: bool, quant: str, workload: str,
          spec: Mapping[str, int],
          threads: int, model: Mapping[str, Any], evidence: Mapping[str, Any],
          fset: FamilySet, expected: Family | None, resolution: Mapping[str, Any],
          probes: list[Probe], probe_dicts: Sequence[Mapping[str, Any]], method: Method | None,
          unmeasured: str | None, bin_dir: Path, timeout: float, host_flags: frozenset[str],
          base: Any, seen: Any = None) -> dict[str, Any]:
    cell, advertised, advertised_variant = cell_levels_12(
        rung=rung, expected=expected, evidence=evidence, quant=quant, workload=workload,
        spec=spec, threads=threads, host_flags=host_flags, method=method)
    if unmeasured:
        cell.update(judge_cell(expected=expected, families=fset, resolution=resolution, totals={},
                               advertised=advertised, unmeasured=unmeasured))
        cell["L3"] = None
        return cell
    assert method is not None and base is not None
    tool_argv = workload_argv(bin_dir, model["path"], spec, threads, rung.get("bench_argv") or [],
                              verbose)
    launcher = method.launcher
    argv = launcher + tool_argv
    env = dict(rung.get("env") or {})
    if seen is None:  # not counted in a process shared with other cells
        seen = method.count(tool_argv, env, stem, (rung["name"], quant, workload, threads),
                            timeout, crosscheck=threads == 1 and not rung.get("variant_of"))
    hits, crash, inst_fail = seen.hits, seen.crash, seen.failure
    if crash is None and base.signal_name:
        crash = {"signal": base.signal_name}
        if launcher:
            from ladder.preparing.emulation import guest_crash

            crash.update(symbol=None, method="qemu", note=guest_crash(base.stderr))
    if crash is None and (base.failure() or inst_fail):
        cell.update(judge_cell(expected=expected, families=fset, resolution=resolution, totals={},
                               advertised=advertised,
                               unmeasured=f"the run failed: {base.failure() or inst_fail}"))
        cell["L3"] = None
        cell["argv"] = argv
        return cell
    if crash and not crash.get("symbol") and not launcher:
        diag = diagnose_crash(argv, env=env, timeout_s=timeout)
        crash.update({k: v for k, v in diag.items() if v is not None and k != "signal"})
    totals = family_totals(probe_dicts, hits)
    vendor = vendor_check(expected, base, evidence, probes, hits, seen, threads)
    cell.update(judge_cell(expected=expected, families=fset, resolution=resolution, totals=totals,
                           advertised=advertised, advertised_variant=advertised_variant,
                           crash=crash, exact=bool(method.exact_kinds), vendor=vendor))
    cell["L3"] = {
        "method": method.name,
        "exact_kinds": list(method.exact_kinds),
        "vendor": vendor,
        "families": totals,
        "symbols": {p.symbol: hits[p.id] for p in probes if hits.get(p.id)},
        "unprobed": [{"symbol": p.symbol, "why": p.note} for p in probes if p.addr is None],
        "run_failure": inst_fail, "crash": crash,
        "lldb": None,
        **seen.l3,  # the method's own evidence (lldb's driver; qemu's logs, threads, cross-check)
    }
    cell["argv"] = (seen.l3.get("one_process") or {}).get("argv") or argv  # what really ran
    cell["env"] = env
    # a cell that shared its process with others carries its share of both runs' times
    shared = int((seen.l3.get("one_process") or {}).get("tests", 1))
    cell["cost"] = {"uninstrumented_s": round(base.wall_s / shared, 3),
                    "instrumented_s": round(seen.wall_s / shared, 3),
                    "ratio": round(seen.wall_s / base.wall_s, 3) if base.wall_s > 0 else None,
                    "plain_run_failure": base.failure(), "cells_in_process": shared}
    log.info("%s %s %s t%d: %s (%s)", rung["name"], quant, workload, threads, cell["verdict"],
             cell["detail"])
    return cell


def cell_levels_12(*, rung: Mapping[str, Any], expected: Family | None,
                   evidence: Mapping[str, Any], quant: str, workload: str,
                   spec: Mapping[str, int], threads: int, host_flags: frozenset[str],
                   method: Method | None) -> tuple[dict[str, Any], bool, str | None]:
    """A ledger cell's identity, L1 (what the host offers) and L2 (what the build advertises:
    the family's weight buffer, its compiled features and vendor lines); whether the build
    advertised the family and which kernel variant."""
    phase = workload_phase(spec)  # one phase per workload: checked with the config
    cell: dict[str, Any] = {"rung": rung["name"], "family": expected.name if expected else None,
                            "quant": quant, "workload": workload, "phase": phase,
                            "threads": threads, "method": method.name if method else None}
    if rung.get("variant_of"):
        cell["variant_of"] = rung["variant_of"]
        cell["toggle_env"] = {k: v for k, v in (rung.get("env") or {}).items()}
    buffers = evidence.get("weight_buffers_mib") or {}
    needed = expected.host_flags if expected else ()
    shown = [*needed, *(f for f in (expected.show_flags if expected else ()) if f not in needed)]
    cell["L1"] = {"host_flags": {f: f in host_flags for f in shown},
                  "needed": list(needed)}
    advertised_variant = (advertised_kernel(evidence, quant)
                          if expected and expected.variants else None)
    advertised = expected is not None and (
        expected.buffer is None or buffers.get(expected.buffer, 0.0) > 0.0)
    cell["L2"] = {"evidence_status": evidence.get("status"), "weight_buffers_mib": buffers,
                  "compiled_features": {k: v for k, v in
                                        (evidence.get("compiled_features") or {}).items()
                                        if v == "1"},
                  "vendor_lines": evidence.get("vendor_lines") or [],
                  "advertised": advertised, "advertised_variant": advertised_variant}
    return cell, advertised, advertised_variant


def vendor_check(expected: Family | None, base: Any, evidence: Mapping[str, Any],
                 probes: Sequence[Probe], hits: Mapping[str, Any], seen: Any,
                 threads: int) -> dict[str, Any] | None:
    """A vendor family's own kernels (KleidiAI): which ran, against what its init lines
    advertised (this run's -v lines, else the rung's evidence run's)."""
    if expected is None or not expected.sets:
        return None
    from ladder.core import parse

    own = parse.kleidiai_primary(base.stderr)  # this run's own init lines (-v)
    primary = own or dict(evidence.get("kleidiai_primary") or {})
    sme = parse.kleidiai_sme(base.stderr) or (evidence.get("kleidiai_sme") if not own
                                               else None)
    ran = [{"symbol": p.symbol, "calls": int(hits[p.id]),
            "threads": seen.per_thread.get(p.id)} for p in probes
           if p.family == expected.name and p.kind == "kernels" and hits.get(p.id)]
    vendor = judge_vendor(expected, ran, primary, sme, threads)
    if vendor is not None:
        vendor["init_lines_from"] = "this run" if own else "the rung's evidence run"
    return vendor


def advertised_kernel(evidence: Mapping[str, Any], quant: str) -> str | None:
    """The kernel variant KleidiAI's init line advertised for this quant ('primary q4 kernel
    feature I8MM' -> Q4_0; q8 -> Q8_0); None for a quant it names no kernel for."""
    primary = evidence.get("kleidiai_primary") or {}
    if not isinstance(primary, Mapping):
        return str(primary) or None
    kind = {"q4_0": "q4", "q8_0": "q8", "f32": "f32"}.get(quant.lower())
    return primary.get(kind) if kind else None


# --- the ledger -----------------------------------------------------------------------------
def build_ledger(*, rung_files: Sequence[str], host: str, out_json: str,
                 must_dispatch: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    docs = [read_json(p) for p in rung_files]
    cells = [c for d in docs for c in d["cells"]]
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    ratios = sorted(c["cost"]["ratio"] for c in cells if c.get("cost") and c["cost"].get("ratio"))
    session = {d["rung"]: d.get("session") for d in docs}
    plain = sum(c["cost"]["uninstrumented_s"] for c in cells if c.get("cost"))
    inst = sum(c["cost"]["instrumented_s"] for c in cells if c.get("cost"))
    overhead = sum((s or {}).get("setup_s", 0) + (s or {}).get("teardown_s", 0)
                   for s in session.values())
    ledger = {
        "format": LEDGER_FORMAT, "host": read_json(host),
        "rungs": [{k: d.get(k) for k in ("rung", "family", "build_key", "method", "method_note",
                                         "session", "resolution", "families_file")} for d in docs],
        "cells": cells, "verdicts": counts,
        "cost": {"cells": len(ratios),
                 "ratio_median": ratios[len(ratios) // 2] if ratios else None,
                 "ratio_max": ratios[-1] if ratios else None,
                 "uninstrumented_s": round(plain, 2), "instrumented_s": round(inst, 2),
                 "session_overhead_s": round(overhead, 2),
                 "ledger_ratio": round((inst + overhead) / plain, 3) if plain else None},
        "gate": gate(cells, must_dispatch),
        "crosscheck": crosscheck_summary(cells),
        "patterns": sme_patterns(cells),
    }
    atomic_write_json(out_json, ledger)
    return ledger


def _sme_calls(vendor: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in vendor.get("kernels") or []:
        if r.get("shape") and r.get("calls") and r.get("variant") in vendor.get("sme_variants", ()):
            key = f"{r['operand']} {r['shape']}"
            out[key] = out.get(key, 0) + int(r["calls"])
    return out


def sme_patterns(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the thread counts of one rung x quant x phase say together about KleidiAI's SME
    kernels: SME at the counts within the SME thread cap and none above it (the cap), the
    work split above it (HYBRID), or SME off at every count (disabled, e.g. a toggle)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for c in cells:
        v = (c.get("L3") or {}).get("vendor")
        if v is not None:
            groups.setdefault((c["rung"], c["quant"], c["workload"]), []).append(c)
    out = []
    for (rung, quant, workload), cs in groups.items():
        cs = sorted(cs, key=lambda c: c["threads"])
        sme = next((c["L3"]["vendor"].get("sme") for c in cs if c["L3"]["vendor"].get("sme")),
                   None) or {}
        cap = sme.get("thread_cap")
        calls = {c["threads"]: _sme_calls(c["L3"]["vendor"]) for c in cs}
        on = [t for t, n in calls.items() if n]
        off = [t for t, n in calls.items() if not n]
        split = {c["threads"]: c["L3"]["vendor"]["splits"] for c in cs
                 if c["L3"]["vendor"].get("splits")}
        where = {"rung": rung, "quant": quant, "workload": workload,
                 "threads": [c["threads"] for c in cs], "sme_thread_cap": cap,
                 "cap_source": sme.get("cap_source"), "sme_calls": calls}
        if sme.get("state") == "disabled":
            out.append({**where, "pattern": "SME_OFF",
                        "text": f"SME disabled ({sme.get('line')}): no SME kernel at "
                                f"{', '.join(map(str, calls))} thread(s)" +
                                ("" if not on else f"; yet SME ran at {on} (check!)")})
        elif on and off and max(on) < min(off):
            ops = sorted({k for t in on for k in calls[t]})
            out.append({**where, "pattern": "SME_THREAD_CAP",
                        "text": f"SME thread cap: SME kernels ({', '.join(ops)}) ran at "
                                f"{', '.join(map(str, on))} thread(s) and none at "
                                f"{', '.join(map(str, off))}, where the non-SME fallback set "
                                f"took their work (init line: SME thread cap={cap}, "
                                f"{sme.get('cap_source') or 'source unknown'})"})
        elif split:
            t, xs = next(iter(split.items()))
            out.append({**where, "pattern": "SME_SPLIT",
                        "text": f"SME split above the thread cap ({cap}): at {t} threads " +
                                "; ".join(f"{x['operand']} {x['shape']} SME on threads "
                                          f"{x['sme']['threads']}, {'/'.join(x['other']['variants'])}"
                                          f" on {x['other']['threads']}" for x in xs)})
        elif on and not off and cap is not None and any(t > cap for t in on):
            out.append({**where, "pattern": "SME_BEYOND_CAP",
                        "text": f"SME kernels ran at {on} thread(s), beyond the SME thread "
                                f"cap ({cap}) the init line gave"})
    return out


def crosscheck_summary(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How many cells a second method (QEMU's gdbstub) counted again, and whether they agree."""
    checks: list[tuple[Mapping[str, Any], Any]] = [
        (c, (c.get("L3") or {}).get("crosscheck")) for c in cells]
    checks = [(c, x) for c, x in checks if x]
    if not checks:
        return None
    name = lambda c: f"{c['rung']}/{c['quant']}/{c['workload']}/t{c['threads']}"  # noqa: E731
    return {"method": checks[0][1].get("method"), "cells": len(checks),
            "agree": [name(c) for c, x in checks if x.get("agree") is True],
            "disagree": [{"cell": name(c), "diff": x.get("disagree")} for c, x in checks
                         if x.get("agree") is False],
            "not_checked": [{"cell": name(c), "why": x.get("error") or x.get("skipped")}
                            for c, x in checks if x.get("agree") is None]}


def _selected(cell: Mapping[str, Any], sel: Mapping[str, Any]) -> bool:
    for key in ("rung", "quant", "workload", "threads"):
        if key in sel and str(sel[key]).lower() != str(cell[key]).lower():
            return False
    return True


def gate(cells: Sequence[Mapping[str, Any]], must: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cells the user marked must-dispatch whose verdict is not accepted."""
    failures = []
    unmatched = []
    for sel in must:
        accept = set(sel.get("accept") or ["DISPATCHED", "HYBRID"])
        chosen = [c for c in cells if _selected(c, sel)]
        if not chosen:
            unmatched.append(dict(sel))
        for c in chosen:
            if c["verdict"] not in accept:
                failures.append({"cell": f"{c['rung']}/{c['quant']}/{c['workload']}/t{c['threads']}",
                                 "verdict": c["verdict"], "detail": c["detail"],
                                 "accepted": sorted(accept)})
    return {"rules": [dict(s) for s in must], "failures": failures, "unmatched": unmatched,
            "passed": not failures and not unmatched}


def check_gate(ledger_json: str, out_flag: str) -> None:
    ledger = read_json(ledger_json)
    g = ledger["gate"]
    if g["unmatched"]:
        raise LadderError(f"dispatch.must_dispatch: selector(s) {g['unmatched']} match no "
                          "ledger cell (check rung/quant/workload/threads)")
    if g["failures"]:
        lines = "; ".join(f"{f['cell']}: {f['verdict']} ({f['detail']})" for f in g["failures"])
        raise LadderError(f"dispatch.must_dispatch: {len(g['failures'])} cell(s) fell back: "
                          f"{lines}. The ledger is kept in {ledger_json}")
    atomic_write_text(out_flag, f"passed {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
