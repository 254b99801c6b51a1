"""Is the noise the host's? Two small C probes that have nothing to do with llama.cpp, and a
check whether either predicts a slow llama-bench process (issue 18). A measurement that prints
figures, not a test.

- ``spin`` (probes/spin.c): one thread pinned to each vCPU runs fixed chunks of integer work in
  100 ms bursts (no memory traffic). Its speed can only change if the vCPU itself got slower
  (a co-tenant on the physical core, clocks): the per-CPU series and its dips are printed.
- ``mem`` (probes/mem.c): a process allocates fresh memory (``--mem-mib``, about the size of the
  repacked weights), touches it and stream-reads it with 2 threads. Within ONE process the same
  pages are read again and again; BETWEEN back-to-back processes each gets fresh pages. If the
  between-process spread is much wider than the within-process one, where a process's memory
  lands decides its speed; if both drift alike, the machine's bandwidth moves with time.
- ``sentinel`` (with ``--bin-dir`` and ``--model``): llama-bench processes, each with a 200 ms
  ``spin`` burst right before and right after it. If the bursts' slower CPU predicted the
  process's speed, a slow process could be flagged from outside and re-measured (issue 18,
  item 1); the correlations say whether it can.

Every probe's raw output is kept in --out/host_noise.json (the llama-bench JSON too).

Measured 2026-12-02 on this project's 2-core x86_64 VM, nothing else running (sentinel:
native_repack, Q4_0, pp128):
- spin: at 16:12 both CPUs at 481-486 M steps/s median, SD 1.2-1.7 %; at 17:33 one CPU dipped to
  406 (SD 3.0 %) while the other stayed at 438-484; at 15:54 one CPU ran at 419-447 for ~2 s.
- mem (17:33, this version: equal numbers of 8-pass blocks, 3.5 s in one process against 6.3 s
  of processes): within one process SD 2.2 % (10.8-11.7 GiB/s); between 30 processes SD 6.2 %
  (10.8-13.8 GiB/s): 9 of the 30 processes read at 11.9-13.8 GiB/s, faster than the single
  process in any of its blocks (at most 11.7). At 16:12 an earlier version, with 37 passes in
  0.5 s within one process, gave 1.6 % within against 8.8 % between. Where a fresh process's
  memory lands moves its bandwidth by up to ~25 %.
- sentinel, the burst AFTER / BEFORE a process against its speed, five runs of 20-24 processes
  (the first three driven by a scratch script with the same probe): pp128 +0.69 / -0.09,
  tg64 +0.44 / -0.03, pp128 +0.09 / -0.25, pp128 +0.81 / +0.05 (16:12: the three slowest, 463,
  509 and 556 tok/s, were followed by bursts at 370, 387 and 424 against ~472), pp128
  -0.30 / +0.05 (17:33). The burst after sometimes catches a host slowdown that outlasts a
  process; it is no reliable flag, and the burst before predicts nothing.

    .venv/bin/python measurements/host_noise.py --out /tmp/host-noise \\
        [--bin-dir resources/builds/<key>/build/bin --model resources/models/…/q4_0.gguf]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

# round_statistic (beside this script) puts the workflow's package on the path
from round_statistic import WORKLOADS, add_bench_arguments, speed_spread, one as bench

from ladder.core.io import atomic_write_json

PROBES = Path(__file__).resolve().parent / "probes"


def build(out: Path) -> dict[str, str]:
    exe = {}
    for name in ("spin", "mem"):
        exe[name] = str(out / name)
        subprocess.run(["gcc", "-O2", "-pthread", "-Wall", str(PROBES / f"{name}.c"), "-o",
                        exe[name]], check=True)
    return exe


def spin(exe: str, bursts: int, burst_ms: int = 100) -> list[list[float]]:
    """Per burst, each CPU's speed (continuous bursts, both CPUs busy)."""
    out = subprocess.run([exe, str(bursts), str(burst_ms), "0", "2"], capture_output=True,
                         text=True, check=True).stdout
    return [[float(x) for x in line.split()[1:]] for line in out.strip().splitlines()]


def mem(exe: str, mib: int, passes: int) -> list[float]:
    out = subprocess.run([exe, str(mib), str(passes)], capture_output=True, text=True,
                         check=True).stdout
    return [float(x) for x in out.split()]


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f}, min {min(values):.2f}, max {max(values):.2f}"
            f" (max/min {100 * (max(values) / min(values) - 1):.0f} %), SD of logs "
            f"{100 * speed_spread(values):.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="host_noise")
    ap.add_argument("--bursts", type=int, default=80, help="spin: 100 ms bursts")
    ap.add_argument("--mem-mib", type=int, default=160)
    ap.add_argument("--processes", type=int, default=30, help="mem: back-to-back processes")
    add_bench_arguments(ap, required=False)  # the sentinel's build and model (optional)
    ap.add_argument("--sentinel-runs", type=int, default=24)
    a = ap.parse_args()
    if bool(a.bin_dir) != bool(a.model):
        ap.error("the sentinel needs both --bin-dir and --model (or neither)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    exe = build(out)
    doc: dict[str, Any] = {"args": vars(a)}

    series = spin(exe["spin"], a.bursts)
    doc["spin"] = series
    print(f"spin, {a.bursts} x 100 ms, both CPUs busy (M steps/s):")
    for cpu in range(2):
        v = [row[cpu] for row in series]
        med = statistics.median(v)
        dips = sum(x < 0.95 * med for x in v)
        print(f"  cpu{cpu}: {spread(v)}; {dips} of {len(v)} bursts below 0.95x the median")

    # the same number of 8-pass blocks inside ONE process as there are processes, so both
    # series span about the same time: a drift of the machine hits them alike
    t0 = time.monotonic()
    passes = mem(exe["mem"], a.mem_mib, 8 * a.processes)
    within = [statistics.median(passes[i * 8 + 2:(i + 1) * 8]) for i in range(a.processes)]
    within_s = time.monotonic() - t0
    t0 = time.monotonic()
    between = [statistics.median(mem(exe["mem"], a.mem_mib, 8)[2:]) for _ in range(a.processes)]
    between_s = time.monotonic() - t0
    doc["mem"] = {"within_passes": passes, "within": within, "between": between,
                  "within_s": within_s, "between_s": between_s}
    print(f"mem, {a.mem_mib} MiB of fresh memory, stream-read by 2 threads (GiB/s, median of "
          "passes 3-8 of each block of 8):")
    print(f"  within one process ({a.processes} blocks, {within_s:.1f} s): {spread(within)}")
    print(f"  between {a.processes} processes ({between_s:.1f} s): {spread(between)}")
    print("  blocks:    " + " ".join(f"{x:.1f}" for x in within))
    print("  processes: " + " ".join(f"{x:.1f}" for x in between))

    if a.bin_dir and a.model:
        runs = []
        raw = out / "sentinel"
        raw.mkdir(exist_ok=True)
        for i in range(a.sentinel_runs):
            before = [statistics.median(c) for c in zip(*spin(exe["spin"], 2))]
            got = bench(a.bin_dir, a.model, WORKLOADS[a.workload], a.threads, 3,
                        raw / f"run{i:02d}")
            after = [statistics.median(c) for c in zip(*spin(exe["spin"], 2))]
            runs.append({"before": before, "after": after, "ts": statistics.fmean(got["ts"]),
                         "reps": got["ts"], "wall_s": got["wall_s"], "cpu_s": got["cpu_s"],
                         "disturbed": got["disturbed"]})
        doc["sentinel"] = runs
        speed = [math.log(r["ts"]) for r in runs]
        print(f"sentinel: {a.sentinel_runs} llama-bench {a.workload} processes (-r 3, "
              f"{a.threads} threads), a 200 ms spin burst before and after each:")
        print("  process tok/s: " + " ".join(f"{r['ts']:.0f}" for r in runs))
        for side in ("before", "after"):
            probe = [math.log(min(r[side])) for r in runs]
            print(f"  {side}: slower CPU " + " ".join(f"{min(r[side]):.0f}" for r in runs))
            print(f"  correlation of log({side} burst, slower CPU) with log(process speed): "
                  f"{statistics.correlation(probe, speed):+.2f}")
    atomic_write_json(out / "host_noise.json", doc)
    print(f"raw figures in {out / 'host_noise.json'}")


if __name__ == "__main__":
    main()
