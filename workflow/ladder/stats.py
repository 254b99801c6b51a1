"""Noise floor, paired ratios with bootstrap confidence intervals, and verdicts.

A ratio is *called* (faster/slower) only when it is significant (its CI excludes 1) AND its
distance from 1 exceeds the noise floor, the largest round-to-round deviation of the control
rung from its twin (the same build under two labels). Otherwise it is "within noise".
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from ladder.errors import LadderError

MAD_Z = 3.5  # Iglewicz & Hoaglin's modified z-score cut-off


@dataclass(frozen=True)
class RatioEstimate:
    estimate: float | None  # geometric mean of the per-round ratios
    lo: float | None
    hi: float | None
    n: int
    per_round: list[float]
    confidence: float


@dataclass(frozen=True)
class Verdict:
    call: str  # faster | slower | within noise | insufficient data | no noise floor
    significant: bool
    beyond_floor: bool
    text: str


def per_round_means(samples: Iterable[Mapping[str, Any]], rung: str) -> dict[int, float]:
    acc: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        if s["rung"] == rung:
            acc[int(s["round"])].append(float(s["tokens_per_s"]))
    return {r: float(np.mean(v)) for r, v in acc.items()}


def paired_ratios(samples: Sequence[Mapping[str, Any]], base: str, other: str) -> list[float]:
    """other/base per round, over the rounds in which both were measured."""
    a, b = per_round_means(samples, base), per_round_means(samples, other)
    return [b[r] / a[r] for r in sorted(set(a) & set(b)) if a[r] > 0]


def ratio_ci(ratios: Sequence[float], confidence: float = 0.95, resamples: int = 10000,
             seed: int = 0) -> RatioEstimate:
    n = len(ratios)
    if n == 0:
        return RatioEstimate(None, None, None, 0, [], confidence)
    logs = np.log(np.asarray(ratios, dtype=float))
    est = float(np.exp(logs.mean()))
    if n < 2:
        return RatioEstimate(est, None, None, n, list(ratios), confidence)
    if np.ptp(logs) == 0:
        lo = hi = est
    else:
        res = sps.bootstrap((logs,), np.mean, confidence_level=confidence, n_resamples=resamples,
                            method="percentile", random_state=np.random.default_rng(seed))
        lo, hi = float(np.exp(res.confidence_interval.low)), float(np.exp(res.confidence_interval.high))
    return RatioEstimate(est, lo, hi, n, [float(r) for r in ratios], confidence)


def unpaired_ratio_ci(base: Sequence[float], other: Sequence[float], confidence: float = 0.95,
                      resamples: int = 10000, seed: int = 0) -> RatioEstimate:
    """other/base for two independent sets of round means (e.g. two hosts): the ratio of their
    geometric means, with a two-sample percentile bootstrap (each side resampled on its own).
    ``n`` is the smaller side; ``per_round`` is empty (nothing pairs the rounds)."""
    n = min(len(base), len(other))
    if n == 0 or min(base) <= 0 or min(other) <= 0:
        return RatioEstimate(None, None, None, n, [], confidence)
    la, lb = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(other, dtype=float))
    est = float(np.exp(lb.mean() - la.mean()))
    if n < 2:
        return RatioEstimate(est, None, None, n, [], confidence)
    res = sps.bootstrap((lb, la), lambda b, a, axis=-1: b.mean(axis=axis) - a.mean(axis=axis),
                        confidence_level=confidence, n_resamples=resamples, method="percentile",
                        vectorized=True, random_state=np.random.default_rng(seed))
    return RatioEstimate(est, float(np.exp(res.confidence_interval.low)),
                         float(np.exp(res.confidence_interval.high)), n, [], confidence)


def noise_floor(control_vs_twin: RatioEstimate) -> float | None:
    """How far from 1 the same build measured under two labels can land, at this sample size.

    The control/twin ratio is estimated exactly like every rung ratio (geometric mean of the
    per-round ratios, bootstrap CI); the floor is the largest deviation from 1 inside that CI.
    A rung ratio whose estimate lies inside the floor is indistinguishable from relabelling.
    """
    if control_vs_twin.lo is None or control_vs_twin.hi is None or control_vs_twin.n < 2:
        return None
    return float(max(abs(control_vs_twin.lo - 1.0), abs(control_vs_twin.hi - 1.0)))


def max_round_deviation(ratios: Sequence[float]) -> float | None:
    """The largest single-round deviation of the control from its twin (reported, not used)."""
    return float(max(abs(r - 1.0) for r in ratios)) if ratios else None


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def verdict(r: RatioEstimate, floor: float | None) -> Verdict:
    if r.estimate is None or r.lo is None or r.hi is None or r.n < 3:
        return Verdict("insufficient data", False, False,
                       f"insufficient data ({r.n} paired rounds; at least 3 needed)")
    if floor is None:
        return Verdict("no noise floor", False, False,
                       "not judged: no noise floor (the control or its twin was not measured)")
    significant = r.lo > 1.0 or r.hi < 1.0
    beyond = abs(math.log(r.estimate)) > math.log1p(floor)
    pct = f"{floor * 100:.1f} %"
    if significant and beyond:
        call = "faster" if r.estimate > 1 else "slower"
        ci = f"{int(r.confidence * 100)}% CI {fmt_ratio(r.lo)}-{fmt_ratio(r.hi)}"
        text = f"{fmt_ratio(r.estimate)} {call} ({ci}; noise floor {pct})"
        return Verdict(call, True, True, text)
    why = "not significant" if not significant else "inside the noise floor"
    return Verdict("within noise", significant, beyond, f"within noise ({why}; floor {pct})")


def outlier_flags(values: Sequence[float]) -> list[bool]:
    """Median/MAD outliers: flagged for the reader, never removed."""
    x = np.asarray(values, dtype=float)
    if len(x) < 3:
        return [False] * len(x)
    med = np.median(x)
    mad = np.median(np.abs(x - med))
    if mad == 0:
        return [False] * len(x)
    return [bool(abs(0.6745 * (v - med) / mad) > MAD_Z) for v in x]


def check_combinable(doc: Mapping[str, Any]) -> None:
    """Refuse to combine samples whose metadata disagree (pyperf's rule)."""
    samples = doc["samples"]
    where = f"bench {doc['quant']}/{doc['workload']}/t{doc['threads']}"
    for key in ("hostname", "arch", "identity", "thp", "n_threads", "n_prompt", "n_gen",
                "n_depth", "build_commit", "model_size"):
        values = {s.get(key) for s in samples}
        if len(values) > 1:
            raise LadderError(f"{where}: samples disagree on {key} ({sorted(map(str, values))}); "
                              "refusing to combine them")
    keys: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        keys[s["rung"]].add(s["build_key"])
    for rung, ks in keys.items():
        if len(ks) > 1:
            raise LadderError(f"{where}: rung {rung} has samples from builds {sorted(ks)}")


def rung_summary(samples: Sequence[Mapping[str, Any]], rung: str, confidence: float,
                 resamples: int, seed: int) -> dict[str, Any]:
    vals = [float(s["tokens_per_s"]) for s in samples if s["rung"] == rung]
    if not vals:
        return {"n": 0}
    arr = np.asarray(vals)
    out: dict[str, Any] = {"n": len(vals), "median": float(np.median(arr)),
                           "mean": float(arr.mean()), "min": float(arr.min()),
                           "max": float(arr.max()), "ci": None,
                           "outliers": [i for i, f in enumerate(outlier_flags(vals)) if f],
                           "peak_rss_kib": max(int(s.get("peak_rss_kib") or 0)
                                               for s in samples if s["rung"] == rung),
                           # per-round means, in round order: what a cross-host comparison uses
                           "round_means": [m for _, m in sorted(per_round_means(samples,
                                                                                rung).items())]}
    if len(vals) >= 2 and np.ptp(arr) > 0:
        res = sps.bootstrap((arr,), np.median, confidence_level=confidence,
                            n_resamples=resamples, method="percentile",
                            random_state=np.random.default_rng(seed))
        out["ci"] = [float(res.confidence_interval.low), float(res.confidence_interval.high)]
    return out


def summarize_cell(doc: Mapping[str, Any], ladder: Sequence[str], control: str | None,
                   twin: str | None, confidence: float = 0.95, resamples: int = 10000,
                   seed: int = 0) -> dict[str, Any]:
    """Per-rung summaries, the noise floor, and step verdicts for one measured cell."""
    check_combinable(doc)
    samples = [s for s in doc["samples"] if not s.get("warmup")]
    measured = {s["rung"] for s in samples}
    names = list(ladder) + ([control] if control else [])
    rungs = {n: rung_summary(samples, n, confidence, resamples, seed) for n in names}

    floor_est = None
    floor = None
    max_dev = None
    if control and twin and control in measured and twin in measured:
        ct = paired_ratios(samples, twin, control)
        floor_est = ratio_ci(ct, confidence, resamples, seed)
        floor = noise_floor(floor_est)
        max_dev = max_round_deviation(ct)

    def compare(base: str, other: str, kind: str) -> dict[str, Any]:
        r = ratio_ci(paired_ratios(samples, base, other), confidence, resamples, seed)
        v = verdict(r, floor)
        return {"kind": kind, "base": base, "rung": other, "ratio": asdict(r),
                "verdict": asdict(v)}

    steps = []
    present = [n for n in ladder if n in measured]
    for prev, cur in zip(present, present[1:]):
        steps.append(compare(prev, cur, "step"))
    vs_floor = []
    if ladder and ladder[0] in measured:
        for cur in present[1:]:
            vs_floor.append(compare(ladder[0], cur, "vs_floor"))
    return {
        "quant": doc["quant"], "workload": doc["workload"], "threads": doc["threads"],
        "rungs": rungs,
        "noise_floor": {"control": control, "twin": twin, "floor": floor,
                        "definition": "largest |x-1| within the control/twin ratio's CI",
                        "max_round_deviation": max_dev,
                        "control_vs_twin": asdict(floor_est) if floor_est else None},
        "steps": steps, "vs_floor": vs_floor,
    }
