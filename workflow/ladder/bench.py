"""Interleaved llama-bench rounds: every rung once per round, in a fresh shuffled order.

One job per (quant, workload, threads) cell, so slow drift of the machine hits every rung alike.
Every raw llama-bench JSON and stderr is kept; the samples file is derived from them.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ladder import parse, progress
from ladder.errors import LadderError
from ladder.host import host_brief
from ladder.io import atomic_write_json, atomic_write_text, read_json
from ladder.run import run

FORMAT = "ladder-samples/1"


def cell_seed(seed: int, cell: str) -> int:
    """The shuffle seed of one cell: the config seed and the cell's identity, so every cell has
    its own sequence of orders (a position effect then lands on a different rung in each cell
    instead of on the same one everywhere), reproducible and recorded."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{cell}".encode()).digest()[:8], "big")


def round_orders(names: Sequence[str], rounds: int, seed: int,
                 cell: str | None = None) -> list[list[str]]:
    """A shuffled order per round, reproducible from the seed (and the cell's identity)."""
    rng = random.Random(seed if cell is None else cell_seed(seed, cell))
    orders = []
    for _ in range(rounds):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    return orders


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


def built_rungs(rungs: Sequence[Mapping[str, Any]], where: str
                ) -> tuple[list[str], dict[str, dict[str, Any]], dict[str, str]]:
    """The rungs whose build succeeded (names, in order), every rung's status entry, and the
    bin dir of each built one; a failed build is a status, not an error, unless none built."""
    status: dict[str, dict[str, Any]] = {}
    active: list[str] = []
    bins: dict[str, str] = {}
    for r in rungs:
        prov = read_json(r["provenance"])
        entry = {"build_key": prov.get("build_key"), "runtime": r["runtime"],
                 "status": "measured", "reason": None}
        if prov.get("status") != "ok":
            entry.update(status="build_failed", reason=prov.get("reason"), log=prov.get("log"))
        else:
            bins[r["name"]] = prov["bin_dir"]
            active.append(r["name"])
        status[r["name"]] = entry
    if not active:
        raise LadderError(f"{where}: no rung built successfully")
    return active, status, bins


def measure(*, quant: str, workload_name: str, workload: Mapping[str, Any], threads: int,
            rungs: Sequence[Mapping[str, Any]], model_meta: str, rounds: int, reps: int,
            seed: int, warmup: bool, timeout_s: float, raw_dir: str, out_json: str,
            log: str, warmup_rounds: int = 1) -> dict[str, Any]:
    """Run ``warmup_rounds + rounds`` interleaved rounds; warmup-round samples are kept but
    flagged (``"warmup": true``) and never enter the statistics."""
    model = read_json(model_meta)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    active, status, bins = built_rungs(rungs, f"bench {quant}/{workload_name}/t{threads}")
    cell = f"{quant}/{workload_name}/t{threads}"
    orders = round_orders(active, warmup_rounds + rounds, seed, cell)
    brief = host_brief()
    samples: list[dict[str, Any]] = []
    by_name = {r["name"]: r for r in rungs}
    log_lines: list[str] = []
    total = len(orders)
    for rnd, order in enumerate(orders):
        for pos, name in enumerate(order):
            if status[name]["status"] != "measured":
                continue  # crashed earlier: a deterministic crash is not re-run every round
            r = by_name[name]
            argv = bench_argv(bins[name], model["path"], workload, threads, reps, warmup,
                              r["bench_argv"])
            res = run(argv, env=r["env"], timeout_s=timeout_s)
            stem = raw / f"round{rnd:02d}-{pos:02d}-{name}"
            atomic_write_text(f"{stem}.json", res.stdout)
            atomic_write_text(f"{stem}.stderr.log",
                              f"$ {' '.join(argv)}\n# env {r['env']}\n{res.stderr}")
            log_lines.append(f"round {rnd} pos {pos} {name}: rc={res.returncode} "
                             f"wall={res.wall_s:.2f}s rss={res.peak_rss_kib}KiB")
            failure = res.failure()
            tag = ["warmup"] if rnd < warmup_rounds else []
            if failure:
                progress.step("round", rnd + 1, total, name, failure.splitlines()[0], *tag)
                status[name].update(status="crashed" if res.signal_name else "failed",
                                    reason=failure, round=rnd, raw=f"{stem}.stderr.log")
                continue
            for rec in parse.bench_records(res.stdout, f"{stem}.json"):
                if int(rec["n_threads"]) != threads:
                    raise LadderError(f"{stem}.json: llama-bench ran {rec['n_threads']} threads, "
                                      f"asked for {threads}")
                for rep, (ts, ns) in enumerate(zip(rec["samples_ts"], rec["samples_ns"])):
                    samples.append({
                        "rung": name, "round": rnd, "order": pos, "rep": rep,
                        "warmup": rnd < warmup_rounds,
                        "build_key": status[name]["build_key"], "n_threads": rec["n_threads"],
                        "n_prompt": rec["n_prompt"], "n_gen": rec["n_gen"],
                        "n_depth": rec.get("n_depth", 0), "tokens_per_s": float(ts),
                        "ns": int(ns), "build_commit": rec["build_commit"],
                        "model_type": rec["model_type"], "model_size": rec["model_size"],
                        "model_n_params": rec.get("model_n_params"),
                        "repack": rec.get("repack"), "peak_rss_kib": res.peak_rss_kib,
                        "wall_s": round(res.wall_s, 3), "raw": f"{stem}.json", **brief,
                    })
                progress.step("round", rnd + 1, total, name,
                              f"{float(np.mean(rec['samples_ts'])):.1f} tok/s", *tag)
    with open(log, "a") as f:  # beside the progress lines the job's logger already wrote
        f.write("\n".join(log_lines) + "\n")
    doc = {
        "format": FORMAT, "quant": quant, "workload": workload_name, "workload_spec": dict(workload),
        "threads": threads, "model": {k: model.get(k) for k in
                                       ("model", "quant", "sha256", "requantized", "size_bytes")},
        "rounds": rounds, "warmup_rounds": warmup_rounds, "repetitions": reps, "seed": seed,
        "order_seed": {"cell": cell, "seed": cell_seed(seed, cell)},
        "warmup": warmup,
        "orders": orders, "host": brief, "rungs": status, "samples": samples,
    }
    atomic_write_json(out_json, doc)
    return doc
