"""Is this machine's noise a property of a process or of the time it ran (issue 18)? A
measurement that prints figures, not a test.

The same llama-bench binary is measured two ways, at equal measuring time per unit:

- ``within``: ONE process with many repetitions. Consecutive blocks of ``--block``
  repetitions are compared with each other (log ratio of block means). Nothing about the
  process changes between its blocks: only time passes.
- ``between``: back-to-back processes of ``--block`` repetitions each (one model load each).
  Consecutive processes are compared the same way.

If ``between`` is much wider than ``within``, the noise lives in the process (memory placement,
thread placement at start-up): more, shorter processes help. If they are alike, the noise is the
machine's speed drifting over time (other tenants, clocks): only finer interleaving in time or
more rounds help, and pairing a rung with its control cannot cancel a drift slower than a
round. The lag profile (SD of block log ratios at lag 1, 2, 4, ... blocks) shows how the drift
grows with the time between the two things compared.

Every raw llama-bench JSON is kept under --out; runs that other processes disturbed (the
runner's /proc/stat reading) are reported.

Measured 2026-12-02 12:24 UTC on this project's 2-core x86_64 VM, nothing else running
(native_repack, Q4_0, pp128, 2 threads, blocks of 5 repetitions = 0.86 s of measuring):
within one process the block SD was 7.6 % at lag 1 and 11.5-12.4 % at lag 2-4 (drift over
seconds); between processes 25.2 % at lag 1, and 3 of 24 processes ran at 537-548 tok/s
against 680-890 for the rest (a slow mode of whole processes, none flagged disturbed).

    .venv/bin/python measurements/noise_timescale.py --bin-dir resources/builds/<key>/build/bin \
        --model resources/models/…/q4_0.gguf --workload pp128 --threads 2 --block 5 --blocks 24
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

# round_statistic (beside this script) puts the workflow's package on the path
from round_statistic import (  # the same llama-bench process, kept raw
    WORKLOADS, add_bench_arguments, one as bench, speed_spread)

from ladder.core.io import atomic_write_json


def lag_sd(values: list[float], lag: int) -> float | None:
    """SD of log(values[i + lag] / values[i]), as a fraction."""
    ratios = [values[i + lag] / values[i] for i in range(len(values) - lag)]
    return speed_spread(ratios) if len(ratios) >= 3 else None


def profile(values: list[float]) -> dict[int, float | None]:
    lags, lag = {}, 1
    while lag <= len(values) // 3:
        lags[lag] = lag_sd(values, lag)
        lag *= 2
    return lags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_bench_arguments(ap)
    ap.add_argument("--block", type=int, default=5, help="repetitions per block (= per process)")
    ap.add_argument("--blocks", type=int, default=24)
    ap.add_argument("--out", default="noise_timescale")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    wl = WORKLOADS[a.workload]
    one = bench(a.bin_dir, a.model, wl, a.threads, a.block * a.blocks, out / "within")
    within_s = time.monotonic() - t0
    within = [statistics.fmean(one["ts"][i * a.block:(i + 1) * a.block]) for i in range(a.blocks)]
    tokens = wl["n_prompt"] + wl["n_gen"]
    block_s = sum(tokens / ts for ts in one["ts"]) / a.blocks

    t0 = time.monotonic()
    procs = [bench(a.bin_dir, a.model, wl, a.threads, a.block, out / f"between-{i:02d}")
             for i in range(a.blocks)]
    between_s = time.monotonic() - t0
    between = [statistics.fmean(p["ts"]) for p in procs]
    rep_cv = statistics.fmean(statistics.stdev(p["ts"]) / statistics.fmean(p["ts"])
                              for p in procs) if a.block > 1 else None

    summary = {"args": vars(a), "block_measuring_s": block_s,
               "within": {"block_means": within, "lags": profile(within),
                          "disturbed": one["disturbed"], "seconds": within_s},
               "between": {"process_means": between, "lags": profile(between),
                           "disturbed": [p["disturbed"] for p in procs],
                           "seconds": between_s, "rep_cv": rep_cv,
                           "wall_per_process_s": statistics.fmean(p["wall_s"] for p in procs)}}
    atomic_write_json(out / "summary.json", summary)

    def line(name: str, vals: list[float], lags: dict[int, float | None]) -> str:
        spread = 100 * (max(vals) / min(vals) - 1)
        prof = "  ".join(f"lag {k}: {100 * v:.1f} %" for k, v in lags.items() if v is not None)
        return f"{name:8s} max/min {spread:5.1f} %  SD of log ratios  {prof}"

    print(f"{a.workload} at {a.threads} threads, blocks of {a.block} repetitions "
          f"({block_s:.2f} s of measuring each), {a.blocks} blocks")
    print(line("within", within, summary["within"]["lags"]))
    print(line("between", between, summary["between"]["lags"]))
    print(f"within: one process, {within_s:.0f} s"
          f"{' (disturbed: ' + one['disturbed'] + ')' if one['disturbed'] else ''}; between: "
          f"{a.blocks} processes, {between_s:.0f} s ({summary['between']['wall_per_process_s']:.1f}"
          f" s each), {sum(bool(p['disturbed']) for p in procs)} disturbed; repetition CV inside "
          f"a process {100 * (rep_cv or 0):.1f} %")
    print("block means, within: " + " ".join(f"{v:.0f}" for v in within))
    print("process means, between: " + " ".join(f"{v:.0f}" for v in between))
    print(f"raw llama-bench JSON and summary.json in {out}")


if __name__ == "__main__":
    main()
