"""Interleaved llama-bench rounds: every rung once per round, in a fresh shuffled order.

One job per (quant, workload, threads) cell, so slow drift of the machine hits every rung alike.
Every raw llama-bench JSON and stderr is kept; the samples file is derived from them. The round
loop (orders, re-measures, looks, the pilot) is ``ladder.measuring.harness``'s; this module
says how one llama-bench process runs and what its samples are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, cast

import numpy as np

from ladder.core import parse, progress
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.machine import cpu_set
from ladder.core.run import RunResult, run
from ladder.core.records import CellDoc, RungEntry
from ladder.measuring import harness
from ladder.measuring.harness import Attempt, Budget, Cell, Outcome, Paths, Policy
from ladder.measuring.llama_bench import bench_argv
from ladder.planning import protocol

FORMAT = "ladder-samples/1"


def calibrated_repetitions(samples: Sequence[Mapping[str, Any]], rungs: Sequence[Mapping[str, Any]],
                           rule: Mapping[str, Any]) -> dict[str, int]:
    """llama-bench -r per rung, from the warmup round's speed (pyperf calibrates its loops the
    same way): enough repetitions that one process measures for ``min_seconds``, at most
    ``max``. A fast rung's round becomes the mean of several repetitions (measured here: the
    pair-ratio spread of pp128 fell from 5.2 % to 3.0 % with the mean of 5), while the slow floor,
    whose single repetition already lasts seconds, is not run five times longer. A control and
    its twin (one binary, the noise floor) always get the same count."""
    seconds: dict[str, list[float]] = {}
    for s in samples:
        if s.get("warmup") and s.get("ns"):
            seconds.setdefault(s["rung"], []).append(float(s["ns"]) / 1e9)
    out = {}
    for r in rungs:
        got = sorted(seconds.get(r["name"]) or [])
        rep_s = got[len(got) // 2] if got else None
        out[r["name"]] = (max(1, min(int(rule["max"]), math.ceil(float(rule["min_seconds"]) / rep_s)))
                          if rep_s else 1)
    for r in rungs:
        if r.get("twin_of") in out:
            out[r["twin_of"]] = out[r["name"]] = max(out[r["twin_of"]], out[r["name"]])
    return out


def sample_record(rep: int, ts: float, ns: int, rec: Mapping[str, Any], res: RunResult,
                  threads: int) -> dict[str, Any]:
    """One repetition of one process, with everything that must agree before samples combine
    (``stats.check_combinable``); the harness adds the round, the rung and where it ran."""
    wall = res.wall_s
    return {
        "rep": rep, "n_threads": rec["n_threads"], "n_prompt": rec["n_prompt"],
        "n_gen": rec["n_gen"], "n_depth": rec.get("n_depth", 0), "tokens_per_s": float(ts),
        "ns": int(ns), "build_commit": rec["build_commit"], "model_type": rec["model_type"],
        "model_size": rec["model_size"], "model_n_params": rec.get("model_n_params"),
        "repack": rec.get("repack"), "peak_rss_kib": res.peak_rss_kib, "wall_s": round(wall, 3),
        "cpu_share": round(res.cpu_s / (wall * threads), 4) if wall > 0 else None,
    }


def entry_cpus(cpus: Sequence[int] | None, threads: int) -> list[int] | None:
    """Where one process of ``threads`` runs in a cell placed on ``cpus``: the whole set for a
    cell of one count; for a reconciliation entry of fewer threads, as many CPUs of the set as
    ``machine.cpu_set`` would give a bench cell of that count (CPU 0 left out while spare)."""
    if cpus is None:
        return None
    return list(cpus) if threads >= len(cpus) else cpu_set(threads, "auto", allowed=cpus)


@dataclass
class BenchCell(harness.Experiment):
    """A bench cell: one llama-bench process per rung and round, every repetition a sample."""

    name: str
    quant: str
    workload_name: str
    workload: Mapping[str, Any]
    threads: int
    model: dict[str, Any]
    reps_by: dict[str, int] = field(default_factory=dict)  # calibrated (repetitions auto)

    def threads_of(self, at: Attempt) -> int:
        """The entry's thread count: a reconciliation cell's entries carry their own."""
        return int((at.rung.get("reconcile") or {}).get("threads") or self.threads)

    def process(self, cell: Cell, policy: Policy, at: Attempt) -> Outcome:
        threads = self.threads_of(at)
        # before an auto calibration (the warmup round) every rung runs 1 repetition
        argv = bench_argv(cell.bins[at.name], self.model["path"], self.workload, threads,
                          self.reps(at.name, policy), policy.warmup, at.rung["bench_argv"])
        res = run(argv, env=at.rung["env"], timeout_s=policy.timeout_s,
                  cpus=entry_cpus(policy.cpu_list, threads))
        atomic_write_text(f"{at.stem}.json", res.stdout)
        atomic_write_text(f"{at.stem}.stderr.log",
                          f"$ {' '.join(argv)}\n# env {at.rung['env']}\n{res.stderr}")
        out = Outcome({}, res.machine, res.cpus_seen, res.failure(), bool(res.signal_name),
                      f"{at.stem}.stderr.log", detail=f"rc={res.returncode} wall={res.wall_s:.2f}s "
                      f"cpu={res.cpu_s:.2f}s rss={res.peak_rss_kib}KiB")
        if out.failure:
            return out
        samples, speeds = [], []
        for rec in parse.bench_records(res.stdout, f"{at.stem}.json"):
            if int(rec["n_threads"]) != threads:
                raise LadderError(f"{at.stem}.json: llama-bench ran {rec['n_threads']} threads, "
                                  f"asked for {threads}")
            samples += [{**sample_record(rep, ts, ns, rec, res, threads),
                         "raw": f"{at.stem}.json"}
                        for rep, (ts, ns) in enumerate(zip(rec["samples_ts"], rec["samples_ns"]))]
            speeds.append(f"{float(np.mean(rec['samples_ts'])):.1f} tok/s")
        out.records, out.note = {"samples": samples}, ", ".join(speeds)
        return out

    def reps(self, name: str, policy: Policy) -> int:
        """llama-bench -r of a rung: calibrated after the warmup round (``after_warmup``), 1
        before it with repetitions auto, else the policy's."""
        return self.reps_by.get(name) or (1 if policy.auto else int(policy.reps))

    def after_warmup(self, cell: Cell, policy: Policy) -> None:
        if not policy.auto or policy.rep_rule is None:
            return
        self.reps_by = calibrated_repetitions(cell.samples, cell.rungs, policy.rep_rule)
        progress.step("calibrated", 1, 1, "llama-bench -r " + ", ".join(
            f"{n} {k}" for n, k in self.reps_by.items()),
            f"(each process measures >= {policy.rep_rule['min_seconds']:g} s, at most "
            f"{policy.rep_rule['max']} repetitions)")


def measure(exp: BenchCell, rungs: Sequence[RungEntry], block: Mapping[str, Any],
            paths: Paths, identity: Mapping[str, Any] | None = None,
            one_build: bool = False, own_cpus: int | None = None,
            budget: Budget | None = None) -> CellDoc:
    """Run ``warmup_rounds + rounds`` interleaved rounds of the cell (``harness.measure``);
    ``block``: its ``measure`` settings, read by ``harness.policy_from``. Warmup-round samples
    are kept but flagged (``"warmup": true``) and never enter the statistics.

    Every run records what it got from the machine (its CPU time; the other processes' and the
    hypervisor's share of the CPUs meanwhile). A measured round in which a run was clearly
    disturbed is measured again in a fresh order, up to ``max_remeasure`` times; the disturbed
    attempt's samples are kept, marked, and never enter the statistics. A round still disturbed
    after that is recorded as unresolved (the report says "disturbed", never "equivalent").

    The rounds are fixed (``rounds``), or, with ``rounds_from_noise.enabled``, chosen once per
    cell at a pilot look from its own control/twin spread (``harness.pilot``: enough rounds to
    call ``target`` with 80 % power, within ``min``-``max``). With ``retire.enabled``, after
    each measured-round count in ``retire.looks`` a rung whose every comparison is a gross step
    already called at the strict level ``retire.alpha`` is not run again (``harness.look``),
    e.g. the slow floor once its 20x step is certain. Nothing else ends a cell early; the
    control and its twin run every round.

    ``cpus``: where every process of the cell runs (``machine.cpu_set``): one fixed CPU set of
    ``threads`` CPUs for every rung, read back from /proc while each process runs and recorded
    with its samples; a process seen on other CPUs is an error.

    ``repetitions: auto``: each rung's llama-bench -r is calibrated from its warmup-round speed
    (``calibrated_repetitions``, rule ``auto_repetitions``); warmup rounds run one repetition.

    ``own_cpus``: the job's CPUs (``harness.disturbed``: on a shared node others may use the
    rest). ``identity``: what the cell is, carried by the result (a serving point's
    experiment). ``one_build``: every rung is one build's binary (a toggle, a lever's
    settings); when that build failed or is not applicable, the cell is written with each
    rung's status and no samples (the report names it), instead of failing the workflow.

    With ``sequential.enabled`` (on in config.yaml) the pilot and the looks above give way to the
    anytime-valid design: a look after every round, each comparison measured until it is
    decided, within the cell's allowance of the run's ``budget`` (``ladder.planning.budget``),
    recorded with the cell (``sequential``, ``budget``) and in the run's ledger."""
    cell, policy, meta, allowed = harness.run_budgeted(
        exp, rungs, block, paths, (exp.threads, protocol.phase_of(exp.workload), own_cpus),
        budget, paths.out_json, none_ok=one_build)
    doc: CellDoc = cast(CellDoc, {
        **dict(identity or {}), "format": FORMAT, **meta, "quant": exp.quant,
        "workload": exp.workload_name, "workload_spec": dict(exp.workload),
        "threads": exp.threads,
        "model": {k: exp.model.get(k) for k in
                  ("model", "quant", "sha256", "requantized", "size_bytes")},
        "repetitions": policy.reps,
        "repetitions_by_rung": {r["name"]: exp.reps(r["name"], policy) for r in rungs},
        "auto_repetitions": policy.rep_rule, "warmup": policy.warmup,
        "budget": allowed if policy.sequential else None, "samples": cell.samples,
    })
    atomic_write_json(paths.out_json, doc)
    return doc


def bench_cell(quant: str, workload_name: str, workload: Mapping[str, Any], threads: int,
               model_meta: str) -> BenchCell:
    """The cell of one quant, workload and thread count, on the model ``model_meta`` records."""
    return BenchCell(name=f"{quant}/{workload_name}/t{threads}", quant=quant,
                     workload_name=workload_name, workload=workload, threads=threads,
                     model=read_json(model_meta))


def reconcile_cell(quant: str, workload_name: str, workload: Mapping[str, Any],
                   rungs: Sequence[RungEntry], model_meta: str) -> BenchCell:
    """The reconciliation cell of one quant and workload: every (rung, threads) entry of
    ``rungs`` (``Plan.grid_entries``) in the same rounds, the cell's CPU set sized for the
    largest count."""
    counts = sorted({int(r["reconcile"]["threads"]) for r in rungs if r.get("reconcile")})
    if not counts:
        raise LadderError(f"reconcile {quant}/{workload_name}: no (rung, threads) entries")
    return BenchCell(name=f"{quant}/{workload_name}/reconcile", quant=quant,
                     workload_name=workload_name, workload=workload, threads=max(counts),
                     model=read_json(model_meta))


def grid_identity(rungs: Sequence[RungEntry]) -> dict[str, Any]:
    """What a reconciliation cell's result records of its entries: each entry's rung and
    thread count, and its A/A pair (the control and its twin's entry)."""
    control = next((r for r in rungs if r.get("twin_of")), None)
    return {"experiment": "reconcile",
            "grid": {n: {"rung": rung, "threads": t}
                     for n, (rung, t) in (harness.grid_of(rungs) or {}).items()},
            "control": control["name"] if control else None,
            "twin": control.get("twin_of") if control else None}


def reconcile_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """The measure settings of a reconciliation cell: the bench's, its anytime-valid design
    waiting for the same-count steps and the thread-count comparisons (a rung's best count),
    and no Haybittle-Peto retirement (its steps pair consecutive rungs of one count only)."""
    out = dict(block)
    if out.get("sequential"):
        out["sequential"] = {**out["sequential"], "wait_for": ["step", "threads"]}
    if out.get("retire"):
        out["retire"] = {**out["retire"], "enabled": False}
    return out
