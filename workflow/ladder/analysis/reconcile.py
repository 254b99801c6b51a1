"""Thread reconciliation (issue 57, items 1-2): each rung at its own best thread count.

A reconciliation cell (``ladder.measuring.bench.reconcile_cell``) measures every (rung,
threads) entry in the same interleaved rounds, so every comparison across thread counts is
paired. Per cell this judges, with the ladder's rule (``stats.ratio_ci``, ``stats.verdict``):

- each rung's thread counts against each other, and its **best count**: the fastest count,
  named best only when every other count is called slower than it; otherwise the **tied set**
  (the counts not called slower) is named, and nothing downstream picks one of them;
- each step of the ladder **at equal threads** (``A@t -> B@t``, every count);
- each step **best against best** (B at its best count over A at its best): judged on every
  pairing of the two tied sets, and called only when every pairing gives the same call;
- the sentence the Arm Dispatch Ledger's section 4 wrote by hand, from the numbers: where the
  step at equal threads and the step best-vs-best disagree (a higher rung whose best count is
  below the lower rung's: its kernels stop gaining threads; a higher rung at fewer threads
  beating the lower rung's best);
- the dispatch ledger's verdict at each rung's best count, so "best" is tied to which kernels
  ran.

Registered as a report section in ``ladder.reporting.sections``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping, Sequence

import numpy as np

from ladder.analysis import stats, wording
from ladder.core.io import load_each, load_first
from ladder.planning.protocol import clean_samples, paired_ratios, per_round_means
from ladder.analysis.context import SectionContext


def grid_of(doc: Mapping[str, Any]) -> dict[str, tuple[str, int]]:
    """entry name -> (rung, threads), as the cell recorded it."""
    return {n: (str(g["rung"]), int(g["threads"])) for n, g in (doc.get("grid") or {}).items()}


class Judge:
    """One cell's comparisons, each on its paired rounds with the ladder's rule."""

    def __init__(self, doc: Mapping[str, Any], stats_cfg: Mapping[str, Any],
                 threshold: float | None) -> None:
        self.samples = clean_samples(doc["samples"])
        self.statistic = stats.round_statistic(doc)
        seq = doc.get("sequential") or None
        self.design = int(seq["max"]) if seq else None
        self.confidence = float(stats_cfg["confidence"])
        self.factor = stats.cell_factor(doc, stats_cfg)
        self.threshold = threshold

    def speed(self, name: str) -> float | None:
        """A name's geometric mean over its rounds (tokens/s)."""
        means = [v for v in per_round_means(self.samples, name, self.statistic).values() if v > 0]
        return float(np.exp(np.mean(np.log(means)))) if means else None

    def __call__(self, base: str, other: str) -> dict[str, Any]:
        r = stats.ratio_ci(paired_ratios(self.samples, base, other, self.statistic),
                           self.confidence, self.factor, design_max=self.design)
        v = stats.verdict(r, self.threshold)
        return {"base": base, "other": other, "ratio": asdict(r), "verdict": asdict(v),
                "call": v.call, "estimate": r.estimate}


def best_counts(judge: Judge, names: Mapping[int, str]) -> dict[str, Any]:
    """A rung's best thread count (``names``: count -> entry): the fastest by its geometric
    mean, and the counts not called slower than it (the tied set). Best is one count only when
    every other is called slower."""
    speeds = {t: judge.speed(n) for t, n in names.items()}
    have = {t: s for t, s in speeds.items() if s}
    if not have:
        return {"threads": [], "fastest": None, "decided": False, "pairs": [],
                "speeds": speeds}
    top = max(have, key=lambda t: have[t])
    pairs = [{"threads": t, "vs": top, **judge(names[top], names[t])}
             for t in sorted(have) if t != top]
    tied = sorted([top] + [p["threads"] for p in pairs if p["call"] != "slower"])
    return {"threads": tied, "fastest": top, "decided": len(tied) == 1, "pairs": pairs,
            "speeds": speeds}


def best_vs_best(judge: Judge, lower: Mapping[str, Any], higher: Mapping[str, Any],
                 a_names: Mapping[int, str], b_names: Mapping[int, str]) -> dict[str, Any]:
    """The higher rung at its best count over the lower at its best, on every pairing of their
    tied sets; called only when every pairing gives the same call (else "depends on the best
    count", the pairings named)."""
    pairings = [{"base_threads": ta, "threads": tb, **judge(a_names[ta], b_names[tb])}
                for ta in lower["threads"] for tb in higher["threads"]]
    calls = {p["call"] for p in pairings}
    main = next((p for p in pairings if p["base_threads"] == lower["fastest"]
                 and p["threads"] == higher["fastest"]), pairings[0] if pairings else None)
    call = calls.pop() if len(calls) == 1 else ("depends on the best count" if calls else None)
    return {"call": call, "main": main, "pairings": pairings}


def ledger_verdicts(ledger: Mapping[str, Any] | None, rung: str, quant: str,
                    phase: str | None) -> dict[int, str]:
    """The dispatch ledger's verdict per thread count of one rung, quant and phase."""
    return {int(c["threads"]): str(c["verdict"]) for c in (ledger or {}).get("cells") or []
            if c.get("rung") == rung and str(c.get("quant")).lower() == quant.lower()
            and c.get("phase") == phase and c.get("verdict")}


def cell(doc: Mapping[str, Any], ladder: Sequence[str], stats_cfg: Mapping[str, Any],
         ledger: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One reconciliation cell judged (the module's docstring)."""
    grid = grid_of(doc)
    phase = stats.doc_phase(doc, clean_samples(doc["samples"]))
    threshold = stats.threshold_for(stats_cfg.get("threshold"), phase)
    judge = Judge(doc, stats_cfg, threshold)
    measured = {str(s["rung"]) for s in judge.samples}
    counts = sorted({t for _, t in grid.values()})
    by_rung: dict[str, dict[int, str]] = {}
    for name, (rung, t) in grid.items():
        if name in measured and rung in ladder:
            by_rung.setdefault(rung, {})[t] = name
    order = [r for r in ladder if r in by_rung]
    quant = str(doc["quant"])
    rungs: list[dict[str, Any]] = []
    for r in order:
        best = best_counts(judge, by_rung[r])
        verdicts = ledger_verdicts(ledger, r, quant, phase)
        rungs.append({"rung": r, "best": best, "dispatch": {str(t): v for t, v in
                                                            verdicts.items()},
                      "text": wording.best_count(r, best, verdicts)})
    best_of: dict[str, dict[str, Any]] = {x["rung"]: x["best"] for x in rungs}
    steps = []
    for a, b in zip(order, order[1:]):
        same = [{"threads": t, **judge(by_rung[a][t], by_rung[b][t])} for t in counts
                if t in by_rung[a] and t in by_rung[b]]
        if not best_of[a]["threads"] or not best_of[b]["threads"]:
            continue
        bvb = best_vs_best(judge, best_of[a], best_of[b], by_rung[a], by_rung[b])
        steps.append({"base": a, "rung": b, "same_threads": same, "best_vs_best": bvb,
                      "sentence": wording.reconcile_sentence(a, b, same, bvb)})
    aa = None
    control, twin = doc.get("control"), doc.get("twin")
    if control in measured and twin in measured:  # the A/A pair, at the largest count
        got = judge(twin, control)
        aa = {"control": control, "twin": twin, **got,
              "text": stats.control_check(stats.RatioEstimate(**got["ratio"]))["text"]}
    return {"model": (doc.get("model") or {}).get("model"), "quant": quant,
            "workload": doc["workload"], "phase": phase, "threshold": threshold,
            "counts": counts, "rounds": (doc.get("sequential") or {}).get("measured_rounds")
            or doc.get("rounds"), "rungs": rungs, "steps": steps, "aa": aa,
            "stop": wording.cell_stop(doc.get("sequential"), (aa or {}).get("ratio", {})
                                      .get("n", 0)).lstrip("; ")}


def dispatch_by_threads(ledger: Mapping[str, Any], ladder: Sequence[str]
                        ) -> list[dict[str, Any]]:
    """The dispatch ledger's verdict at each thread count, per rung (its runtime variants too),
    quant and phase: what an emulated host's reconciliation shows in place of timing."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for c in ledger.get("cells") or []:
        key = (str(c["rung"]), str(c["quant"]).lower(), str(c.get("phase")))
        row = rows.setdefault(key, {"rung": key[0], "quant": key[1], "phase": key[2],
                                    "by_threads": {}})
        row["by_threads"][str(c["threads"])] = c.get("verdict")
    order = {n: i for i, n in enumerate(ladder)}
    return sorted(rows.values(), key=lambda r: (r["quant"], r["phase"],
                                                order.get(r["rung"], len(order)), r["rung"]))


def section(ctx: SectionContext) -> dict[str, Any] | None:
    """The report's reconciliation section: every reconciliation cell of the host, judged; on
    an emulated host (no timing) the dispatch ledger at each thread count instead."""
    files = ctx.files.get("reconcile") or []
    ledger = load_first(ctx.files.get("reconcile_ledger") or [], ctx.missing)
    ladder = list(ctx.plan.get("ladder_order") or [])
    if not files:
        if not (ctx.plan.get("emulated") and ledger):
            return None
        rows = dispatch_by_threads(ledger, ladder)
        return {"counts": sorted({int(t) for r in rows for t in r["by_threads"]}), "cells": [],
                "sentences": [], "emulated": {"text": wording.RECONCILE_EMULATED,
                                              "dispatch": rows}}
    docs = load_each(files, ctx.missing)
    cells = [cell(d, ladder, ctx.stats_cfg, ledger) for d in docs]
    return {"counts": sorted({t for c in cells for t in c["counts"]}), "cells": cells,
            "sentences": [s["sentence"] for c in cells for s in c["steps"] if s["sentence"]]}
