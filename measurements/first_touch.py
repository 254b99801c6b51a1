"""What llama-bench's own warmup run buys (measure.warmup): each process runs ``-r K
--no-warmup``, and its first repetition (cold: first touch of the compute and KV buffers, the
thread pool's first wake-up) is compared with the median of its later ones. Printed per binary
and workload: the first repetition's seconds and its excess over the later ones, over
``--processes`` processes. A measurement that prints figures, not a test.

    .venv/bin/python measurements/first_touch.py --model resources/models/.../q4_0.gguf \
        --bin floor=resources/builds/<key>/build/bin --bin native_repack=resources/builds/<key2>/build/bin \
        --workload pp128 --workload tg64 --processes 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from ladder.core import parse
from ladder.measuring.llama_bench import bench_argv


def parse_workload(text: str) -> dict[str, int]:
    if text.startswith("pp"):
        return {"n_prompt": int(text[2:]), "n_gen": 0}
    if text.startswith("tg"):
        return {"n_prompt": 0, "n_gen": int(text[2:])}
    raise SystemExit(f"--workload {text}: expected ppN or tgN")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--bin", action="append", required=True, help="NAME=BIN_DIR (repeatable)")
    ap.add_argument("--workload", action="append", default=[], help="ppN or tgN (repeatable)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--processes", type=int, default=5)
    a = ap.parse_args()
    bins = dict(b.split("=", 1) for b in a.bin)
    print(f"{'binary':<16}{'workload':<10}{'first rep s':>12}{'first/later':>13}  per process")
    for wl in a.workload or ["pp128"]:
        workload = parse_workload(wl)
        for name, bin_dir in bins.items():
            excess, firsts = [], []
            for _ in range(a.processes):
                # the bench's own command line, without llama-bench's warmup run
                argv = bench_argv(bin_dir, a.model, workload, a.threads, a.reps, False, [])
                out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
                ns = parse.bench_records(out, f"{name} {wl}")[0]["samples_ns"]
                first, later = ns[0] / 1e9, statistics.median(ns[1:]) / 1e9
                firsts.append(first)
                excess.append(first / later)
            print(f"{name:<16}{wl:<10}{statistics.median(firsts):>12.3f}"
                  f"{statistics.median(excess):>12.3f}x  "
                  + " ".join(f"{x:.3f}" for x in excess), flush=True)


if __name__ == "__main__":
    main()
