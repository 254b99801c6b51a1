"""The concurrency serving experiment: per round and rung one llama-batched-bench over every
parallel-sequence count: throughput and per-request latency vs parallel sequences (the offline
view: one batch, no request waits in a queue); every raw output kept. It runs through
``ladder.measuring.harness`` (the bench cells' round loop); the report's view of it is
``ladder.analysis.serving_view``, its settings ``serving.concurrency``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.run import run
from ladder.core.records import RungEntry
from ladder.measuring import harness
from ladder.measuring.harness import Attempt, Cell, Outcome, Paths, Policy

FORMAT = "ladder-serving/1"


def batched_records(text: str, source: str) -> list[dict[str, Any]]:
    """llama-batched-bench --output-format jsonl: one JSON object per line (others skipped)."""
    recs = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise LadderError(f"{source}: unreadable jsonl line: {line[:120]}") from exc
            if "pl" in rec and "speed" in rec:
                recs.append(rec)
    if not recs:
        raise LadderError(f"{source}: no llama-batched-bench jsonl records")
    return recs


class Concurrency(harness.ModelExperiment):
    """Per round and rung: one llama-batched-bench over every parallel-sequence count."""

    def process(self, cell: Cell, policy: Policy, at: Attempt) -> Outcome:
        cfg = self.cfg
        ctx = max(cfg["parallel"]) * (cfg["n_prompt"] + cfg["n_gen"]) + 16
        argv = [str(Path(cell.bins[at.name]) / "llama-batched-bench"), "-m", self.model["path"],
                "-c", str(ctx), "-npp", str(cfg["n_prompt"]), "-ntg", str(cfg["n_gen"]),
                "-npl", ",".join(str(p) for p in cfg["parallel"]), "-t", str(self.threads),
                "--output-format", "jsonl", *at.rung["common_argv"]]
        res = run(argv, env=at.rung["env"], timeout_s=policy.timeout_s, cpus=policy.cpu_list)
        atomic_write_text(f"{at.stem}.jsonl", res.stdout)
        atomic_write_text(f"{at.stem}.stderr.log", f"$ {' '.join(argv)}\n{res.stderr}")
        out = Outcome({}, res.machine, res.cpus_seen, res.failure(), bool(res.signal_name),
                      f"{at.stem}.stderr.log", note=f"{res.wall_s:.1f} s")
        if not out.failure:
            out.records["samples"] = [{
                "parallel": int(rec["pl"]), "tokens_per_s": float(rec["speed"]),
                "speed_pp": float(rec["speed_pp"]), "speed_tg": float(rec["speed_tg"]),
                "t_s": float(rec["t"]), "n_threads": self.threads,
                "peak_rss_kib": res.peak_rss_kib,
            } for rec in batched_records(res.stdout, f"{at.stem}.jsonl")]
        return out


def concurrency(rungs: Sequence[RungEntry], block: Mapping[str, Any],
                settings: Mapping[str, Any], paths: Paths, threads: int,
                own_cpus: int | None = None) -> dict[str, Any]:
    """Throughput and per-request latency vs parallel sequences (``Concurrency``), every rung
    interleaved; ``block``: the serving policy (``harness.policy_from``)."""
    model = read_json(paths.model_meta)
    cfg = settings["concurrency"]
    exp = Concurrency(name=f"concurrency/{model['quant']}/t{threads}", model=model, cfg=cfg,
                      threads=threads)
    cell, _, meta = harness.run_cell(exp, rungs, block, paths, (threads, None, own_cpus))
    doc = {"format": FORMAT, **meta,
           "experiment": "concurrency", "quant": model["quant"].lower(),
           "workload": "concurrency", "threads": threads, "spec": dict(cfg),
           "samples": cell.samples,
           "method": "llama-batched-bench -npp/-ntg per sequence, -npl parallel sequences; "
                     "throughput = all tokens / batch time; per-request latency = batch time"}
    atomic_write_json(paths.out_json, doc)
    return doc
