"""Which per-round statistic resolves best on this machine (issue 18, item 3): a measurement that
prints figures, not a test.

One llama-bench binary is measured under two labels, A and B, in pairs (ABBA order, so a
position effect shows and cancels). Every process runs ``-r K`` repetitions. Per pair, the log
ratio B/A is taken with each candidate statistic of a process's K repetitions:

- ``first``: one repetition per process (the ladder's default before this measurement),
- ``mean``, ``median``, ``best`` (the fastest repetition) of the K.

One build cannot be faster than itself, so the spread (SD) of those log ratios is pure noise:
the smaller, the finer the effects a cell of n rounds can resolve (its interval's half-width is
about t * SD / sqrt(n)). The cost side is printed too: K repetitions inside one process pay one
model load, while K one-repetition processes pay K, so "more processes" is judged at equal time
(SD(first) / sqrt(K) at K times the processes' cost).

Every raw llama-bench JSON is kept under --out; a run that other processes disturbed is marked
(the runner's /proc/stat reading) and left out of the figures, as the workflow does.

    .venv/bin/python measurements/round_statistic.py --bin-dir resources/builds/<key>/build/bin \
        --model resources/models/…/q4_0.gguf --workloads pp128,tg64 --threads 1,2 --pairs 8 --reps 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from ladder.core import parse
from ladder.measuring.llama_bench import bench_argv
from ladder.measuring.harness import disturbed
from ladder.planning.config import schema_defaults
from ladder.core.io import atomic_write_json, atomic_write_text
from ladder.core.run import run

DISTURBANCE = schema_defaults(Path(__file__).resolve().parents[1] / "workflow" / "schemas"
                              / "config.schema.yaml", "measure")["disturbance"]

STATS = {
    "first": lambda v: v[0],
    "mean": statistics.fmean,
    "median": statistics.median,
    "best": max,
}
WORKLOADS = {"pp32": {"n_prompt": 32, "n_gen": 0}, "pp128": {"n_prompt": 128, "n_gen": 0},
             "tg64": {"n_prompt": 0, "n_gen": 64}, "pp16": {"n_prompt": 16, "n_gen": 0},
             "tg16": {"n_prompt": 0, "n_gen": 16}}


def one(bin_dir: str, model: str, wl: dict[str, int], threads: int, reps: int,
        stem: Path, env: dict[str, str] | None = None,
        extra: list[str] | None = None) -> dict[str, Any]:
    argv = bench_argv(bin_dir, model, wl, threads, reps, True, extra or [])
    res = run(argv, env=env, timeout_s=1800)
    atomic_write_text(f"{stem}.json", res.stdout)
    if not res.ok:
        raise SystemExit(f"{stem}: llama-bench failed: {res.failure()}")
    rec = parse.bench_records(res.stdout, f"{stem}.json")[0]
    return {"ts": [float(x) for x in rec["samples_ts"]], "wall_s": res.wall_s,
            "cpu_s": res.cpu_s, "disturbed": disturbed(res.machine, DISTURBANCE),
            "machine": res.machine}


def add_bench_arguments(ap: argparse.ArgumentParser, required: bool = True) -> None:
    """The arguments of a script that runs one llama-bench build on one model."""
    ap.add_argument("--bin-dir", required=required, help="a llama-bench build's bin dir")
    ap.add_argument("--model", required=required)
    ap.add_argument("--workload", default="pp128", choices=sorted(WORKLOADS))
    ap.add_argument("--threads", type=int, default=2)


def speed_spread(values: list[float]) -> float:
    """The SD of the values' logs, as a fraction (the spread of speeds or ratios, scale-free)."""
    return math.expm1(statistics.stdev(math.log(v) for v in values))


def sd_log(pairs: list[tuple[list[float], list[float]]], stat: str) -> tuple[float, float]:
    """SD and mean of log(stat(B) / stat(A)) over the pairs."""
    logs = [math.log(STATS[stat](b) / STATS[stat](a)) for a, b in pairs]
    return statistics.stdev(logs), statistics.fmean(logs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workloads", default="pp128,tg64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="round_statistic")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"args": vars(a), "cells": {}}
    for wname in a.workloads.split(","):
        for threads in [int(t) for t in a.threads.split(",")]:
            cell = f"{wname}/t{threads}"
            runs: list[dict[str, Any]] = []
            t0 = time.monotonic()
            for i in range(a.pairs):
                order = "AB" if i % 2 == 0 else "BA"  # ABBA: position effects cancel
                got = {}
                for pos, label in enumerate(order):
                    got[label] = one(a.bin_dir, a.model, WORKLOADS[wname], threads, a.reps,
                                     out / f"{wname}-t{threads}-pair{i:02d}-{pos}{label}")
                runs.append({"pair": i, "order": order, **{k: got[k] for k in "AB"}})
            spent = time.monotonic() - t0
            clean = [r for r in runs if not r["A"]["disturbed"] and not r["B"]["disturbed"]]
            pairs = [(r["A"]["ts"], r["B"]["ts"]) for r in clean]
            row: dict[str, Any] = {"pairs": len(runs), "clean_pairs": len(clean),
                                   "seconds": round(spent, 1),
                                   "wall_per_process_s": round(statistics.fmean(
                                       r[k]["wall_s"] for r in runs for k in "AB"), 2),
                                   "runs": runs}
            if len(pairs) >= 3:
                for stat in STATS:
                    sd, mean = sd_log(pairs, stat)
                    row[f"sd_{stat}"] = sd
                    row[f"mean_{stat}"] = mean
                # position effect: log(second / first) over the pairs, from the 'first' statistic
                pos = [math.log(STATS["first"](r["B" if r["order"] == "AB" else "A"]["ts"]) /
                                STATS["first"](r["A" if r["order"] == "AB" else "B"]["ts"]))
                       for r in clean]
                row["position_effect"] = statistics.fmean(pos)
                # within-process spread of the repetitions (how much -r alone varies)
                row["rep_cv"] = statistics.fmean(
                    statistics.stdev(v) / statistics.fmean(v)
                    for r in clean for v in (r["A"]["ts"], r["B"]["ts"]) if len(v) > 1) \
                    if a.reps > 1 else None
            results["cells"][cell] = row
            print(report_line(cell, row, a.reps), flush=True)
    atomic_write_json(out / "summary.json", results)
    print(f"raw llama-bench JSON and summary.json in {out}")


def report_line(cell: str, row: dict[str, Any], reps: int) -> str:
    if "sd_first" not in row:
        return f"{cell}: too few clean pairs ({row['clean_pairs']} of {row['pairs']})"
    pct = {s: 100 * math.expm1(row[f"sd_{s}"]) for s in STATS}
    # K one-repetition processes at equal measuring time: the mean of K independent pairs
    procs = 100 * math.expm1(row["sd_first"] / math.sqrt(reps))
    return (f"{cell}: pair-ratio SD  first {pct['first']:.1f} %  mean-of-{reps} "
            f"{pct['mean']:.1f} %  median-of-{reps} {pct['median']:.1f} %  best-of-{reps} "
            f"{pct['best']:.1f} %  | {reps} processes x 1 rep (same reps, {reps}x the loads) "
            f"{procs:.1f} %  | position effect {100 * math.expm1(row['position_effect']):+.1f} %"
            f"  | rep CV {100 * (row['rep_cv'] or 0):.1f} %  | {row['clean_pairs']}/"
            f"{row['pairs']} clean pairs, {row['wall_per_process_s']} s per process")


if __name__ == "__main__":
    main()
