"""What puts a whole llama-bench process in a slow mode (issue 18)? A measurement that prints
figures, not a test.

On this project's VM some processes of one binary run 20-40 % slower than their neighbours,
every repetition inside them alike, with no steal time and nothing else running
(measurements/noise_timescale.py). Candidate causes inside the guest are the placement of the
process's memory (repacked weights in 4 KiB pages; the mapped model file) and of its threads.
Each ``--variant`` changes one of them; the variants run interleaved, one process each per
round in a fresh shuffled order, so the machine's drift hits them alike. Per variant it prints
the median speed, the process-to-process spread (SD of log process means), the share of slow
processes (below ``--slow`` x the round's median over all variants), and the CPU each process
got (CPU time / (wall x threads)).

Built-in variants (``--variants`` picks them, comma-separated):

- ``base``: as the workflow runs llama-bench;
- ``thp``: ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (malloc asks for transparent huge pages,
  so the repacked weights sit in 2 MiB pages; THP is ``madvise`` here);
- ``thp_nommap``: the same and ``--load-mode none`` (the weights that are not repacked are read into
  malloc'd memory too, instead of the page cache's 4 KiB pages);
- ``bind``: ``OMP_PROC_BIND=close OMP_PLACES=cores`` (each OpenMP thread pinned to one CPU).

Every raw llama-bench JSON and a summary.json are kept under --out.

Measured 2026-12-02 16:00 UTC on this project's 2-core x86_64 VM, nothing else running
(native_repack, Q4_0, pp128, 2 threads, -r 5, 10 rounds): process-to-process SD base 8.7 %,
thp 12.9 %, thp_nommap 13.1 %, bind 6.9 %; medians 640-664 tok/s; a slow round hit every variant
alike (534, 491, 621, 621 tok/s in round 2). None of them removes the spread: with 10 processes
each, the differences between the variants are within what one variant varies by itself.
measurements/host_noise.py shows why: the spread is the host's.

    .venv/bin/python measurements/slow_mode.py --bin-dir resources/builds/<key>/build/bin \\
        --model resources/models/…/q4_0.gguf --workload pp128 --threads 2 --rounds 12
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Any

# round_statistic (beside this script) puts the workflow's package on the path
from round_statistic import WORKLOADS, add_bench_arguments, speed_spread, one as bench

from ladder.core.io import atomic_write_json

VARIANTS: dict[str, tuple[dict[str, str], list[str]]] = {
    "base": ({}, []),
    "thp": ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, []),
    "thp_nommap": ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, ["-lm", "none"]),
    "bind": ({"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}, []),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_bench_arguments(ap)
    ap.add_argument("--reps", type=int, default=5, help="llama-bench -r per process")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--slow", type=float, default=0.85,
                    help="a process is slow below this fraction of its round's median")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="slow_mode")
    a = ap.parse_args()
    names = a.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; known: {sorted(VARIANTS)}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(a.seed)
    wl = WORKLOADS[a.workload]
    runs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for rnd in range(a.rounds):
        order = list(names)
        rng.shuffle(order)
        for pos, name in enumerate(order):
            env, extra = VARIANTS[name]
            got = bench(a.bin_dir, a.model, wl, a.threads, a.reps,
                        out / f"round{rnd:02d}-{pos}-{name}", env=env, extra=extra)
            runs.append({"round": rnd, "pos": pos, "variant": name,
                         "mean_ts": statistics.fmean(got["ts"]), **got})
    spent = time.monotonic() - t0
    medians = {r: statistics.median(x["mean_ts"] for x in runs if x["round"] == r)
               for r in range(a.rounds)}
    rows = {}
    for name in names:
        mine = [x for x in runs if x["variant"] == name and not x["disturbed"]]
        speeds = [x["mean_ts"] for x in mine]
        rows[name] = {
            "n": len(mine), "median_ts": statistics.median(speeds),
            "process_sd": speed_spread(speeds) if len(speeds) > 2 else None,
            "slow": sum(x["mean_ts"] < a.slow * medians[x["round"]] for x in mine),
            "rep_cv": statistics.fmean(statistics.stdev(x["ts"]) / statistics.fmean(x["ts"])
                                       for x in mine) if a.reps > 1 else None,
            "cpu_share": statistics.median(x["cpu_s"] / (x["wall_s"] * a.threads) for x in mine),
            "disturbed": sum(1 for x in runs if x["variant"] == name and x["disturbed"]),
        }
    atomic_write_json(out / "summary.json", {"args": vars(a), "seconds": spent, "rows": rows,
                                             "runs": runs})
    print(f"{a.workload} at {a.threads} threads, -r {a.reps}, {a.rounds} rounds of "
          f"{len(names)} variants, {spent:.0f} s")
    for name, r in rows.items():
        print(f"{name:<11} median {r['median_ts']:7.1f} tok/s  process SD "
              f"{100 * (r['process_sd'] or 0):5.1f} %  slow (<{a.slow:g}x round median) "
              f"{r['slow']}/{r['n']}  rep CV {100 * (r['rep_cv'] or 0):4.1f} %  "
              f"CPU share {r['cpu_share']:.2f}  disturbed {r['disturbed']}")
    for name in names:
        print(f"{name:<11} " + " ".join(f"{x['mean_ts']:.0f}" for x in runs
                                         if x["variant"] == name))
    print(f"raw llama-bench JSON and summary.json in {out}")


if __name__ == "__main__":
    main()
