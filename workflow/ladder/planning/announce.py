"""The start of a run: the plan's size and its expected cost, from the jobs Snakemake is about
to run and the times its own metadata recorded for the same outputs last time (the
Snakefile's ``onstart``). The summary is pure (rule names and previous durations in, lines
out). No measuring rule reaches this module: editing it re-measures nothing (issue 60)."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Iterable, Sequence

# the rules whose jobs are measurement time (the rest are set-up, builds and reports);
# tests/test_progress.py checks that each is a rule of the workflow
MEASUREMENT_RULES = ("bench", "reconcile", "evidence", "quality", "dispatch", "hotspots",
                     "kernel_tests", "vendor_tests", "serve_bench", "serve", "bandwidth")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def plan_summary(jobs: Sequence[tuple[str, float | None]]) -> list[str]:
    """Lines for the start of a run. ``jobs``: (rule, seconds the same job took last time, or
    None when nothing was recorded) for every job Snakemake is about to run."""
    if not jobs:
        return []
    counts = Counter(rule for rule, _ in jobs)
    measure = [(r, s) for r, s in jobs if r in MEASUREMENT_RULES]
    by_rule = ", ".join(f"{r} {counts[r]}" for r in MEASUREMENT_RULES if counts[r])
    lines = [f"ladder: {len(jobs)} jobs planned, {len(measure)} of them measurements"
             + (f" ({by_rule})" if by_rule else "")]
    known = [s for _, s in jobs if s is not None]
    unknown = sum(1 for _, s in jobs if s is None)
    if known:
        lines.append(
            f"ladder: expected cost from the previous run's recorded job times: "
            f"{_minutes(sum(known))} for {len(known)} jobs"
            + (f"; {unknown} jobs have no recorded time" if unknown else ""))
    else:
        lines.append("ladder: no recorded job times yet (a first run); the README lists what a "
                     "default run costs on a 2-core machine")
    return lines


def previous_seconds(records: Iterable[tuple[float | None, float | None]]) -> float | None:
    """A job's previous duration from its outputs' (starttime, endtime) records: the longest."""
    spans = [end - start for start, end in records if start and end and end >= start]
    return max(spans) if spans else None




def announce_plan(workflow: object) -> list[str]:
    """Print the plan summary at the start of a run (Snakefile ``onstart``), from the jobs
    Snakemake is about to run and the start/end times its metadata recorded for the same outputs
    last time. Best effort: Snakemake internals that moved give no estimate, never a failure."""
    try:
        dag = workflow.dag  # type: ignore[attr-defined]
        persistence = workflow.persistence  # type: ignore[attr-defined]
        jobs = []
        for job in dag.needrun_jobs():
            records = []
            for f in job.output:
                rec = persistence.metadata(f)
                if rec is not None:
                    records.append((rec.starttime, rec.endtime))
            jobs.append((job.rule.name, previous_seconds(records)))
    except Exception as exc:  # noqa: BLE001 - an estimate is never worth a failed run
        lines = [f"ladder: no plan summary ({type(exc).__name__}: {exc})"]
    else:
        lines = plan_summary(jobs)
    for line in lines:
        print(line, file=sys.stderr)
    return lines
