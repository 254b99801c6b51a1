"""Moderate effects that hold up (issue 42): the A/A rule before and after, on the same real
bench cells. A measurement that prints figures, not a test.

Reads finished bench cells (``ladder-samples/1``; each DIR one run, e.g. a ``bench`` folder of
``results/hosts/<host>/``) measured with fixed rounds (``measure.rounds_from_noise.enabled:
false``, ``rounds: 28``), so each rule's own choice of rounds is replayed by truncating the
series at it. The control and its twin are one build under two labels, so every difference
between them is noise. Prints:

1. **The early regime**: per cell, the mean A/A log ratio over the rounds in which the floor
   still ran against the mean of as many rounds after it retired; the spread of each across
   cells; and the carried-over offset of a rung that follows the floor in a round's order.
2. **Dependence**: the autocorrelations at lags 1-3 of the A/A series after the floor retired
   (each cell about its own mean, pooled over cells, a short series' bias corrected) and the
   variance factor the final analysis takes from them (``stats.run_dependence``), per run and
   over all, with the lag-1 95 % interval: its upper limit is ``protocol.ASSUMED_RHO``.
3. **Old rule beside new**: per cell, the rounds each rule's pilot chose, whether the A/A
   check failed (its 95 % interval excludes 1: the coverage of any constant injected effect is
   one minus that rate), whether the rule called the twin faster or slower (a false call), and
   the power at a true 10 % prefill / 5 % decode effect (the control label's real rounds
   scaled) with the rule's own test and threshold (old: every round, independent rounds, the
   pilot on every round; new: ``protocol.regime_rounds``, the run's ``stats.run_dependence``,
   ``protocol.plan_rounds``). Rates carry Wilson 95 % intervals.

    .venv/bin/python measurements/dependence.py /var/tmp/aa-study/run1/bench ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from ladder.analysis import stats  # noqa: E402
from ladder.planning import protocol  # noqa: E402

CONTROL, TWIN, FLOOR = "control", "native_repack", "floor"
RULE = {"pilot": 10, "min": 12, "max": 28, "assurance": 0.8}
TARGET = {"prefill": 0.10, "decode": 0.05}


def load(dirs: Sequence[str]) -> list[dict[str, Any]]:
    cells = []
    for i, d in enumerate(dirs):
        for f in sorted(Path(d).rglob("t*.json")):
            doc = json.loads(f.read_text())
            if doc.get("format") != "ladder-samples/1" or not doc.get("samples"):
                continue
            samples = protocol.clean_samples(doc["samples"])
            if not {CONTROL, TWIN} <= {s["rung"] for s in samples}:
                continue
            phase = protocol.phase_of(doc["workload_spec"])
            cells.append({"run": i, "name": f"{doc['quant']}/{doc['workload']}/t{doc['threads']}",
                          "doc": doc, "samples": samples, "phase": phase,
                          "delta": protocol.DEFAULT_THRESHOLD[phase]})
    return cells


def first(samples: Sequence[Mapping[str, Any]], rounds: int) -> list[Mapping[str, Any]]:
    """The samples of the first ``rounds`` measured rounds."""
    keep = sorted({int(s["round"]) for s in samples})[:rounds]
    return [s for s in samples if int(s["round"]) in keep]


def old_plan(samples: Sequence[Mapping[str, Any]], phase: str, delta: float) -> int:
    """The rounds protocol version 2 chose: the pilot's SD over every pilot round, no
    allowance for dependence, counted from the first round."""
    logs = np.log(protocol.paired_ratios(first(samples, RULE["pilot"]), TWIN, CONTROL))
    sd = protocol.planning_sd(float(logs.std(ddof=1)), len(logs), RULE["assurance"])
    return protocol.rounds_for(sd, TARGET[phase], delta, max(RULE["min"], RULE["pilot"]),
                               RULE["max"])[0]


def new_plan(cell: Mapping[str, Any]) -> int:
    pilot = first(cell["samples"], RULE["pilot"])
    retired = (cell["doc"].get("retire") or {}).get("retired") or {}
    sets = protocol.measured_sets(pilot)
    running = sets[max(sets)] - {r for r, at in retired.items() if at <= RULE["pilot"]}
    plan = protocol.plan_rounds(pilot, CONTROL, TWIN, {**RULE, "target": TARGET[cell["phase"]]},
                                cell["delta"], RULE["max"], next_set=running)
    return int(plan["rounds"])


def judged(ratios: Sequence[float], delta: float, factor: float, effect: float = 0.0
           ) -> tuple[bool, str]:
    """(A/A check failed, the rule's call) for control/twin ratios scaled by 1 + effect."""
    r = stats.ratio_ci([x * (1 + effect) for x in ratios], 0.95, factor)
    failed = bool(r.lo is not None and (r.lo > 1 + effect or r.hi < 1 + effect))  # type: ignore[operator]
    return failed, stats.verdict(r, delta).call


def rate(hits: int, n: int) -> str:
    ci = sps.binomtest(hits, n).proportion_ci(0.95, method="wilson") if n else None
    lo, hi = (ci.low, ci.high) if ci else (0.0, 0.0)
    return f"{hits}/{n} = {hits / n * 100 if n else 0:.1f} % ({lo * 100:.1f}-{hi * 100:.1f})"


def early_regime(cells: Sequence[Mapping[str, Any]]) -> None:
    print("## 1. The early regime (A/A log ratio, control over twin)")
    early, steady, after = [], [], []
    for c in cells:
        s = c["samples"]
        floor_rounds = {int(x["round"]) for x in s if x["rung"] == FLOOR}
        logs = {r: math.log(v) for r, v in zip(
            sorted(set(protocol.per_round_means(s, CONTROL)) & set(protocol.per_round_means(s, TWIN))),
            protocol.paired_ratios(s, TWIN, CONTROL))}
        e = [v for r, v in logs.items() if r in floor_rounds]
        later = [v for r, v in sorted(logs.items()) if r not in floor_rounds][:len(e)]
        if len(e) < 2 or len(later) < len(e):
            continue
        early.append(float(np.mean(e)))
        steady.append(float(np.mean(later)))
        print(f"- {c['run']}:{c['name']}: {len(e)} rounds with the floor {np.mean(e) * 100:+.1f} %, "
              f"the next {len(later)} without it {np.mean(later) * 100:+.1f} %")
        pos = {(x["rung"], int(x["round"])): int(x.get("order", 0)) for x in s}
        for r in floor_rounds & set(logs):
            pf = pos[(FLOOR, r)]
            if pos.get((CONTROL, r)) == pf + 1:
                after.append(logs[r])
            elif pos.get((TWIN, r)) == pf + 1:
                after.append(-logs[r])
    if early:
        print(f"\nAcross {len(early)} cells: SD of the early-regime means {np.std(early, ddof=1) * 100:.1f} % "
              f"(RMS {math.sqrt(np.mean(np.square(early))) * 100:.1f} %), of as many steady rounds "
              f"{np.std(steady, ddof=1) * 100:.1f} % (RMS {math.sqrt(np.mean(np.square(steady))) * 100:.1f} %)")
    if len(after) >= 3:
        a = np.asarray(after)
        t = a.mean() / (a.std(ddof=1) / math.sqrt(len(a)))
        print(f"A rung right after the floor, over its pair member: {a.mean() * 100:+.1f} % "
              f"(SD {a.std(ddof=1) * 100:.1f} %, {len(a)} rounds, t = {t:.2f})")


def dependence(cells: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    print("\n## 2. Dependence between steady rounds (pooled autocorrelations, variance factor)")
    by_run: dict[int, float] = {}
    for run in sorted({c["run"] for c in cells}):
        d = stats.run_dependence([c["doc"] for c in cells if c["run"] == run], CONTROL, TWIN)
        by_run[run] = d["factor"]
        print(f"- run {run}: {d['text']}")
    d = stats.run_dependence([c["doc"] for c in cells], CONTROL, TWIN)
    print(f"- all runs: {d['text']}")
    if d["measured"]:
        bias = 1 / d["mean_rounds"]  # a lag-1 autocorrelation about the mean reads -1/n
        print(f"- lag 1 with that bias undone: {d['rho'][0] + bias:+.3f}, upper 95 % limit "
              f"{d['ci'][1] + bias:+.3f} (protocol.ASSUMED_RHO = {protocol.ASSUMED_RHO:g})")
    return by_run


def rules(cells: Sequence[Mapping[str, Any]], factor_by_run: Mapping[int, float]) -> None:
    print("\n## 3. Old rule beside new, per cell (rounds; check failed; false call; power)")
    short = [c for c in cells if len({int(s["round"]) for s in c["samples"]}) < RULE["max"]]
    if short:  # measured with rounds chosen by a pilot: a replay wanting more would read less
        print(f"(left out: {len(short)} cells measured with fewer than {RULE['max']} rounds, "
              "which cannot replay a rule that chooses more)")
        cells = [c for c in cells if c not in short]
    tally: dict[str, list[int]] = {k: [0, 0, 0, 0, 0] for k in ("old", "new")}
    power: dict[tuple[str, str], list[int]] = {}
    for c in cells:
        s, delta, phase = c["samples"], c["delta"], c["phase"]
        row = []
        for rule in ("old", "new"):
            if rule == "old":
                n = old_plan(s, phase, delta)
                ratios = protocol.paired_ratios(first(s, n), TWIN, CONTROL)
                factor = 1.0
            else:
                n = new_plan(c)
                ratios = protocol.steady_ratios(first(s, n), TWIN, CONTROL)
                factor = factor_by_run[c["run"]]
            failed, call = judged(ratios, delta, factor)
            _, powered = judged(ratios, delta, factor, TARGET[phase])
            t = tally[rule]
            t[0] += 1
            t[1] += failed
            t[2] += call in stats.CALLS
            t[3] += powered == "faster"
            t[4] += n
            p = power.setdefault((rule, phase), [0, 0])
            p[0] += powered == "faster"
            p[1] += 1
            row.append(f"{rule} {n} rounds ({len(ratios)} read), check "
                       f"{'FAILED' if failed else 'ok'}, {call}, at +{TARGET[phase] * 100:g} %: {powered}")
        print(f"- {c['run']}:{c['name']}: " + "; ".join(row))
    print()
    for rule, (n, failed, calls, hit, rounds) in tally.items():
        print(f"**{rule}**: {n} cells, mean {rounds / max(n, 1):.1f} rounds; A/A check failed "
              f"{rate(failed, n)} (coverage of an injected effect: the rest); false calls "
              f"{rate(calls, n)}; power at 10 % prefill / 5 % decode {rate(hit, n)} (prefill "
              f"{rate(*power[(rule, 'prefill')])}, decode {rate(*power[(rule, 'decode')])})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", help="one folder of bench cells per run")
    args = ap.parse_args()
    cells = load(args.dirs)
    print(f"{len(cells)} cells from {len(args.dirs)} runs\n")
    early_regime(cells)
    rules(cells, dependence(cells))


if __name__ == "__main__":
    main()
