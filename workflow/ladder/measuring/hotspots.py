"""Where the time goes: sampled hotspots per rung x quant x phase x threads.

One llama-bench run per cell (the bench's own workload and thread count, outside the timed
runs) under ``perf record`` with a software clock event (``cpu-clock``: no hardware counters,
so it works on VMs and cloud hosts alike). ``perf report`` gives each symbol's samples; each
symbol joins the kernel family of ``workflow/data/kernel_families.yaml`` whose regexes match it,
else one of the file's time groups (attention, activation quantization, elementwise, threading,
the OS kernel), else "other". The samples cover the whole llama-bench process: its model load
and warmup are in the OS and "other" shares, stated, not hidden.

Where sampling cannot run (no ``perf``, a kernel that forbids it, an emulated host), each cell
says so with the reason.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import progress
from ladder.measuring.llama_bench import bench_argv
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.kernels import FamilySet, load_families
from ladder.core.machine import host_arch, host_brief
from ladder.core.run import run
from ladder.planning.stages import phase_workloads

log = logging.getLogger("ladder.hotspots")
FORMAT = "ladder-hotspots/1"
PHASES = ("prefill", "decode")
APT_HINT = "apt-get install linux-perf"
# "    45.23%          1234  libggml-cpu.so     [.] ggml_vec_dot_q4_0_q8_0"
_ROW = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
_SAMPLES = re.compile(r"^# Samples: (\S+)\s+of event '([^']+)'")
_UNRESOLVED = re.compile(r"^0x[0-9a-f]+$")


# --- parsing and grouping (pure) -----------------------------------------------------------
def parse_perf_report(text: str, source: str = "perf report") -> dict[str, Any]:
    """``perf report --stdio --no-children -n --sort dso,sym``: the event and one row per
    (shared object, symbol) with its samples. Unresolved addresses of one object are pooled
    as "(unresolved in <object>)"."""
    event = None
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line in text.splitlines():
        m = _SAMPLES.match(line)
        if m:
            event = m.group(2)
            continue
        m = _ROW.match(line)
        if not m:
            continue
        _, n, dso, level, sym = m.groups()
        if _UNRESOLVED.match(sym):
            sym = f"(unresolved in {dso})"
        row = rows.setdefault((dso, sym), {"dso": dso, "symbol": sym, "samples": 0,
                                           "os": level == "k"})
        row["samples"] += int(n)
    if event is None and not rows:
        raise LadderError(f"{source}: not perf report output (no '# Samples:' header, no rows)")
    ordered = sorted(rows.values(), key=lambda r: (-r["samples"], r["symbol"]))
    return {"event": event, "samples": sum(r["samples"] for r in ordered), "rows": ordered}


def group_samples(report: Mapping[str, Any], fset: FamilySet, top: int) -> dict[str, Any]:
    """Shares of the cell's samples by family / time group, and its top symbols."""
    total = int(report["samples"])
    groups = {g: 0 for g in fset.group_names()}
    top_rows = []
    for i, r in enumerate(report["rows"]):
        g = fset.time_group_of(r["symbol"], r["dso"])
        groups[g] += int(r["samples"])
        if i < top:
            top_rows.append({**r, "group": g,
                             "share": round(r["samples"] / total, 4) if total else None})
    return {"samples": total,
            "groups": {g: round(n / total, 4) for g, n in groups.items() if n} if total else {},
            "top": top_rows}


# --- running -------------------------------------------------------------------------------
def perf_path() -> str | None:
    return shutil.which("perf")


def unavailable_reason(perf: str | None) -> str | None:
    """Why perf cannot sample here, before trying (None: try it; a refusal is read from perf)."""
    if perf is None:
        return f"perf is not on PATH ({APT_HINT})"
    try:
        level = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if level > 2 and os.geteuid() != 0:
        return (f"kernel.perf_event_paranoid is {level}: this user may not sample "
                "(as root: sysctl kernel.perf_event_paranoid=2)")
    return None


def record_argv(perf: str, data: str, frequency: int, argv: Sequence[str]) -> list[str]:
    # cpu-clock (a software event); user and kernel samples where allowed, user only else
    event = "cpu-clock" if os.geteuid() == 0 else "cpu-clock:u"
    return [perf, "record", "-e", event, "-F", str(frequency), "-o", data, "--", *argv]


def record_pid_argv(perf: str, data: str, frequency: int, pid: int) -> list[str]:
    """``record_argv`` attached to a running process (every thread it has), until SIGINT."""
    event = "cpu-clock" if os.geteuid() == 0 else "cpu-clock:u"
    return [perf, "record", "-e", event, "-F", str(frequency), "-o", data, "-p", str(pid)]


def read_report(perf: str, data: str, stem: Path, fset: FamilySet, top: int,
                timeout_s: float) -> dict[str, Any]:
    """perf's report of ``data`` kept beside it, parsed and grouped (``group_samples``), or
    why not."""
    rep = run(report_argv(perf, data), timeout_s=timeout_s)
    atomic_write_text(f"{stem}.report.txt", rep.stdout)
    if not rep.ok:
        return {"status": "failed", "reason": f"perf report: {rep.failure()}"}
    parsed = parse_perf_report(rep.stdout, f"{stem}.report.txt")
    if not parsed["samples"]:
        return {"status": "failed", "reason": "perf recorded no samples"}
    return {"status": "ok", "reason": None, "event": parsed["event"],
            **group_samples(parsed, fset, top)}


def report_argv(perf: str, data: str) -> list[str]:
    return [perf, "report", "-i", data, "--stdio", "--no-children", "-n", "--sort", "dso,sym",
            "--percent-limit", "0"]


def sample_cell(*, perf: str, argv: Sequence[str], env: Mapping[str, str], stem: Path,
                frequency: int, fset: FamilySet, top: int, timeout_s: float
                ) -> dict[str, Any]:
    """One sampled run: perf.data, perf's report text and the tool's output kept beside."""
    data = f"{stem}.perf.data"
    rec = run(record_argv(perf, data, frequency, argv), env=env, timeout_s=timeout_s)
    atomic_write_text(f"{stem}.record.log", f"$ {' '.join(rec.argv)}\n# env {dict(env)}\n"
                      f"{rec.stdout}\n{rec.stderr}")
    out: dict[str, Any] = {"argv": list(argv), "wall_s": round(rec.wall_s, 2),
                           "raw": {"perf_data": os.path.basename(data),
                                   "record_log": f"{stem.name}.record.log"}}
    if not rec.ok:
        why = rec.failure() or "failed"
        if "perf_event_paranoid" in rec.stderr or "Permission" in rec.stderr:
            why = f"perf may not sample here: {why}"
        return {**out, "status": "failed", "reason": why}
    out["raw"]["report"] = f"{stem.name}.report.txt"
    return {**out, **read_report(perf, data, stem, fset, top, timeout_s)}


def repetitions_for(bench_doc: Mapping[str, Any] | None, rung: str, spec: Mapping[str, Any],
                    settings: Mapping[str, Any]) -> tuple[int, str]:
    """-r of a sampled run: enough repetitions of the workload to last min_seconds at the speed
    the bench measured for this rung and cell (the model load then is a small share)."""
    cap = int(settings["max_repetitions"])
    if not bench_doc:
        return 1, "no bench result for this cell: 1 repetition"
    tps = sorted(float(s["tokens_per_s"]) for s in bench_doc.get("samples") or []
                 if s.get("rung") == rung and not s.get("warmup") and s.get("tokens_per_s"))
    tokens = int(spec.get("n_prompt") or 0) + int(spec.get("n_gen") or 0)
    if not tps or not tokens:
        return 1, f"the bench has no speed of {rung} here: 1 repetition"
    median = tps[len(tps) // 2]
    seconds = tokens / median
    reps = max(1, min(cap, math.ceil(float(settings["min_seconds"]) / seconds)))
    return reps, (f"{reps} x {seconds:.2f} s (the bench's median {median:.1f} tokens/s)"
                  + (f", capped at max_repetitions {cap}" if reps == cap else ""))


def sweep(*, rung: Mapping[str, Any], provenance: str, model_meta: str, quant: str,
          settings: Mapping[str, Any], workloads: Mapping[str, Any], threads: Sequence[int],
          out_json: str, raw_dir: str, families_file: str | None = None,
          bench: Sequence[str] = ()) -> dict[str, Any]:
    """Every phase x threads cell of one rung and quant (``bench``: the bench cells' results,
    whose speed sets each sampled run's repetitions)."""
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    fset = load_families(host_arch(), families_file)
    build = read_json(provenance)
    model = read_json(model_meta)
    phases = phase_workloads(settings, workloads)
    perf = perf_path()
    doc: dict[str, Any] = {
        "format": FORMAT, "ran_on": host_brief(None), "rung": rung["name"], "quant": quant,
        "build_key": rung["build_key"], "families_file": fset.source,
        "groups": {g: (fset.families[g].description if g in fset.families else
                       fset.time_groups[g].description if g in fset.time_groups else
                       "everything else (the model load, llama-bench itself, libc)")
                   for g in fset.group_names()},
        "frequency_hz": int(settings["frequency_hz"]), "perf": perf,
        "min_seconds": float(settings["min_seconds"]), "raw_dir": raw_dir, "cells": []}
    speeds = {(d.get("workload"), int(d.get("threads", 0))): d
              for d in (read_json(p) for p in bench)}
    reason = unavailable_reason(perf)
    if build.get("status") != "ok":
        reason = f"build {build.get('status')}: {build.get('reason')}"
    cells = [(p, w, spec, t) for p, (w, spec) in phases.items() for t in threads]
    for i, (phase, wname, spec, t) in enumerate(cells):
        progress.step("cell", i + 1, len(cells), f"{phase} t{t}")
        head = {"quant": quant, "phase": phase, "workload": wname, "threads": t}
        if reason:
            doc["cells"].append({**head, "status": "unavailable", "reason": reason})
            continue
        reps, why = repetitions_for(speeds.get((wname, t)), rung["name"], spec, settings)
        head.update(repetitions=reps, repetitions_from=why)
        argv = bench_argv(build["bin_dir"], model["path"], spec, t, reps, False,
                          rung.get("bench_argv") or [])
        cell = sample_cell(perf=str(perf), argv=argv, env=rung.get("env") or {},
                           stem=raw / f"{phase}.t{t}", frequency=int(settings["frequency_hz"]),
                           fset=fset, top=int(settings["top"]),
                           timeout_s=float(settings["timeout_s"]))
        doc["cells"].append({**head, **cell})
        log.info("%s t%d: %s", phase, t, cell.get("reason") or ", ".join(
            f"{g} {v:.0%}" for g, v in sorted(cell["groups"].items(), key=lambda kv: -kv[1])[:4]))
    atomic_write_json(out_json, doc)
    return doc
