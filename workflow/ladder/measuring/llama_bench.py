"""llama-bench's command line for one workload, thread count and repetition count: what the bench
cells, the hotspots' sampled runs and the measurement scripts run. Apart from ``bench`` so that
a change to how bench cells are measured does not re-run the hotspots."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence


def bench_argv(bin_dir: str, model: str, workload: Mapping[str, Any], threads: int, reps: int,
               warmup: bool, runtime_args: Sequence[str]) -> list[str]:
    argv = [str(Path(bin_dir) / "llama-bench"), "-m", model,
            "-p", str(workload.get("n_prompt", 0)), "-n", str(workload.get("n_gen", 0)),
            "-t", str(threads), "-r", str(reps), "-o", "json"]
    if workload.get("n_depth"):
        argv += ["-d", str(workload["n_depth"])]
    argv += [str(a) for a in workload.get("args") or ()]  # e.g. -ctk/-ctv/-fa, -ub (serving)
    if not warmup:
        argv.append("--no-warmup")
    return argv + list(runtime_args)
