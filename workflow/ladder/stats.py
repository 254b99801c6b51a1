"""Noise floor, paired ratios with Student-t confidence intervals on the log scale, and verdicts.

Every ratio (rung over rung, control over twin, host over host) is estimated the same way: the
geometric mean of per-round ratios, with a t-interval on the mean log ratio (Welch's for two
unpaired sets). At the round counts used here (3-8) a percentile bootstrap covers far less than
its nominal level (about 83 % at n = 5, 73 % at n = 3); the t-interval's coverage is checked by
simulation in tests/test_stats.py.

The noise floor is a band on the same log scale: how far the same build measured under two labels
(the control and its twin) can land from itself, the reach of the control/twin interval,
``exp(max(|ln lo|, |ln hi|)) - 1``. A ratio is *called* faster/slower only when its whole interval
lies beyond that band; it is *within noise* only when its whole interval lies inside it; an
interval across the band's edge *cannot tell*. A control/twin interval that excludes 1 means the
cell measured one build as faster than itself: its multipliers are held back.
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
METHOD = "geometric mean of per-round ratios; Student t-interval on the mean log ratio"
UNPAIRED_METHOD = "ratio of geometric means; Welch t-interval on the difference of mean logs"


@dataclass(frozen=True)
class RatioEstimate:
    estimate: float | None  # geometric mean of the per-round ratios
    lo: float | None
    hi: float | None
    n: int
    per_round: list[float]
    confidence: float
    method: str = METHOD


@dataclass(frozen=True)
class Verdict:
    # faster | slower | within noise | cannot tell | control check failed | disturbed |
    # insufficient data | no noise floor
    call: str
    significant: bool  # the interval excludes 1
    beyond_floor: bool  # the whole interval lies beyond the floor band
    text: str
    # the smallest effect this cell could have called: floor band + the interval's half-width
    resolving_power: float | None = None


# What one round of one rung is worth, from its process's llama-bench repetitions (-r): every
# repetition is kept as a sample; the statistic is chosen by measurement
# (measurements/round_statistic.py) and recorded in each cell ("round_statistic").
ROUND_STATISTICS = {"mean": np.mean, "median": np.median, "best": np.max}


def round_statistic(doc: Mapping[str, Any]) -> str:
    """The statistic a cell was measured for (cells from before it was recorded: the mean)."""
    return checked_statistic(str(doc.get("round_statistic") or "mean"))


def checked_statistic(name: str) -> str:
    if name not in ROUND_STATISTICS:
        raise LadderError(f"round_statistic {name!r}: not one of {sorted(ROUND_STATISTICS)}")
    return name


def per_round_means(samples: Iterable[Mapping[str, Any]], rung: str,
                    statistic: str = "mean") -> dict[int, float]:
    """One value per round for ``rung``: ``statistic`` (mean, median, or best = the fastest) of
    that round's repetitions."""
    acc: dict[int, list[float]] = defaultdict(list)
    for s in samples:
        if s["rung"] == rung:
            acc[int(s["round"])].append(float(s["tokens_per_s"]))
    f = ROUND_STATISTICS[statistic]
    return {r: float(f(v)) for r, v in acc.items()}


def paired_ratios(samples: Sequence[Mapping[str, Any]], base: str, other: str,
                  statistic: str = "mean") -> list[float]:
    """other/base per round, over the rounds in which both were measured."""
    a = per_round_means(samples, base, statistic)
    b = per_round_means(samples, other, statistic)
    return [b[r] / a[r] for r in sorted(set(a) & set(b)) if a[r] > 0]


def _t_interval(mean: float, se: float, df: float, confidence: float) -> tuple[float, float]:
    if se == 0:
        return math.exp(mean), math.exp(mean)
    half = float(sps.t.ppf((1 + confidence) / 2, df)) * se
    return math.exp(mean - half), math.exp(mean + half)


def ratio_ci(ratios: Sequence[float], confidence: float = 0.95) -> RatioEstimate:
    """Paired ratios: geometric mean and a t-interval on the mean of their logs."""
    n = len(ratios)
    if n == 0:
        return RatioEstimate(None, None, None, 0, [], confidence)
    logs = np.log(np.asarray(ratios, dtype=float))
    est = float(np.exp(logs.mean()))
    if n < 2:
        return RatioEstimate(est, None, None, n, list(ratios), confidence)
    lo, hi = _t_interval(float(logs.mean()), float(logs.std(ddof=1)) / math.sqrt(n), n - 1,
                         confidence)
    return RatioEstimate(est, lo, hi, n, [float(r) for r in ratios], confidence)


def unpaired_ratio_ci(base: Sequence[float], other: Sequence[float],
                      confidence: float = 0.95) -> RatioEstimate:
    """other/base for two independent sets of round means (e.g. two hosts, two runs): the
    ratio of their geometric means with a Welch t-interval on the difference of mean logs.
    ``n`` is the smaller side; ``per_round`` is empty (nothing pairs the rounds)."""
    n = min(len(base), len(other))
    if n == 0 or min(base) <= 0 or min(other) <= 0:
        return RatioEstimate(None, None, None, n, [], confidence, UNPAIRED_METHOD)
    la, lb = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(other, dtype=float))
    diff = float(lb.mean() - la.mean())
    if n < 2:
        return RatioEstimate(math.exp(diff), None, None, n, [], confidence, UNPAIRED_METHOD)
    va, vb = float(la.var(ddof=1)) / len(la), float(lb.var(ddof=1)) / len(lb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1)) if se else 1.0
    lo, hi = _t_interval(diff, se, df, confidence)
    return RatioEstimate(math.exp(diff), lo, hi, n, [], confidence, UNPAIRED_METHOD)


def noise_floor(control_vs_twin: RatioEstimate) -> float | None:
    """How far from 1 the same build measured under two labels can land, at this sample size:
    the reach of the control/twin interval on the log scale, as a fraction (0.04 = a band from
    1/1.04x to 1.04x). Ratios are judged against this band on the same scale."""
    if control_vs_twin.lo is None or control_vs_twin.hi is None or control_vs_twin.n < 2:
        return None
    reach = max(abs(math.log(control_vs_twin.lo)), abs(math.log(control_vs_twin.hi)))
    return float(math.expm1(reach))


def control_check(control_vs_twin: RatioEstimate | None) -> dict[str, Any]:
    """One build cannot be faster than itself: a control/twin interval that excludes 1 fails the
    cell's control check (expected in 1 - confidence of honest cells; more often, the machine
    drifted or the order biased the cell)."""
    ct = control_vs_twin
    if ct is None or ct.lo is None or ct.hi is None:
        return {"passed": None, "text": "no control check (control or twin not measured)"}
    if ct.lo > 1.0 or ct.hi < 1.0:
        return {"passed": False,
                "text": f"control check failed: the same build measured {fmt_ratio(ct.estimate)} "
                        f"against itself ({int(ct.confidence * 100)}% CI "
                        f"{fmt_ratio(ct.lo)}-{fmt_ratio(ct.hi)} excludes 1); this cell's "
                        "multipliers are held back"}
    return {"passed": True,
            "text": f"control/twin {fmt_ratio(ct.estimate)} ({int(ct.confidence * 100)}% CI "
                    f"{fmt_ratio(ct.lo)}-{fmt_ratio(ct.hi)}) includes 1"}


def max_round_deviation(ratios: Sequence[float]) -> float | None:
    """The largest single-round deviation of the control from its twin (reported, not used)."""
    return float(max(abs(r - 1.0) for r in ratios)) if ratios else None


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def verdict(r: RatioEstimate, floor: float | None, control_passed: bool | None = True) -> Verdict:
    """Faster/slower only when the whole interval clears the floor band (log scale); within
    noise only when the whole interval sits inside it; otherwise it cannot tell."""
    if r.estimate is None or r.lo is None or r.hi is None or r.n < 3:
        return Verdict("insufficient data", False, False,
                       f"insufficient data ({r.n} paired rounds; at least 3 needed)")
    if floor is None:
        return Verdict("no noise floor", False, False,
                       "not judged: no noise floor (the control or its twin was not measured)")
    band = math.log1p(floor)
    llo, lhi = math.log(r.lo), math.log(r.hi)
    significant = llo > 0 or lhi < 0
    power = math.expm1(band + (lhi - llo) / 2)
    ci = f"{int(r.confidence * 100)}% CI {fmt_ratio(r.lo)}-{fmt_ratio(r.hi)}"
    pct = f"±{floor * 100:.1f} %"
    if control_passed is False:
        return Verdict("control check failed", significant, False,
                       "not judged: control check failed (the same build differed from itself "
                       "in this cell)", power)
    if llo > band or lhi < -band:
        call = "faster" if llo > band else "slower"
        return Verdict(call, True, True,
                       f"{fmt_ratio(r.estimate)} {call} ({ci}; noise floor {pct})", power)
    if -band <= llo and lhi <= band:
        return Verdict("within noise", significant, False,
                       f"within noise ({ci} inside the {pct} floor; this cell resolves effects "
                       f"beyond ±{power * 100:.1f} %)", power)
    why = "not significant" if not significant else "significant, but reaches into the floor"
    return Verdict("cannot tell", significant, False,
                   f"cannot tell ({why}: {ci} crosses the edge of the {pct} floor; this cell "
                   f"resolves effects beyond ±{power * 100:.1f} %)", power)


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
                 resamples: int, seed: int, statistic: str = "mean") -> dict[str, Any]:
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
                           # per-round values (the cell's round statistic), in round order:
                           # what a cross-host or cross-run comparison uses
                           "round_means": [m for _, m in sorted(per_round_means(
                               samples, rung, statistic).items())]}
    if len(vals) >= 2 and np.ptp(arr) > 0:
        res = sps.bootstrap((arr,), np.median, confidence_level=confidence,
                            n_resamples=resamples, method="percentile",
                            random_state=np.random.default_rng(seed))
        out["ci"] = [float(res.confidence_interval.low), float(res.confidence_interval.high)]
    return out


def cell_floor(samples: Sequence[Mapping[str, Any]], control: str | None, twin: str | None,
               confidence: float, statistic: str = "mean"
               ) -> tuple[RatioEstimate | None, float | None, float | None]:
    """The cell's control/twin estimate, its noise floor and the largest single-round
    deviation (None each when the control or its twin was not measured)."""
    measured = {s["rung"] for s in samples}
    if not (control and twin and control in measured and twin in measured):
        return None, None, None
    ct = paired_ratios(samples, twin, control, statistic)
    est = ratio_ci(ct, confidence)
    return est, noise_floor(est), max_round_deviation(ct)


def comparisons(ladder: Sequence[str], measured: set[str]) -> list[tuple[str, str, str]]:
    """(kind, base, rung) a cell judges: each measured rung over the one before it ("step"),
    and each over the floor when the floor was measured ("vs_floor")."""
    present = [n for n in ladder if n in measured]
    out = [("step", a, b) for a, b in zip(present, present[1:])]
    if ladder and ladder[0] in measured:
        out += [("vs_floor", ladder[0], b) for b in present[1:]]
    return out


def summarize_cell(doc: Mapping[str, Any], ladder: Sequence[str], control: str | None,
                   twin: str | None, confidence: float = 0.95, resamples: int = 10000,
                   seed: int = 0) -> dict[str, Any]:
    """Per-rung summaries, the noise floor, and step verdicts for one measured cell. An
    adaptive cell (bench.measure) is judged at the per-look confidence it stopped with."""
    confidence = float((doc.get("adaptive") or {}).get("confidence_per_look") or confidence)
    statistic = round_statistic(doc)
    check_combinable(doc)
    # a disturbed attempt was measured again (bench.measure): its samples never count
    samples = [s for s in doc["samples"] if not s.get("warmup") and not s.get("disturbed")]
    dist = doc.get("disturbance") or {}
    unresolved = list(dist.get("unresolved") or [])
    measured = {s["rung"] for s in samples}
    names = list(ladder) + ([control] if control else [])
    rungs = {n: rung_summary(samples, n, confidence, resamples, seed, statistic) for n in names}

    floor_est, floor, max_dev = cell_floor(samples, control, twin, confidence, statistic)
    check = control_check(floor_est)

    def compare(base: str, other: str, kind: str) -> dict[str, Any]:
        r = ratio_ci(paired_ratios(samples, base, other, statistic), confidence)
        v = verdict(r, floor, check["passed"])
        if unresolved and v.call in ("insufficient data", "within noise", "cannot tell"):
            # too few clean rounds, or no answer: the machine's fault, and said so
            v = Verdict("disturbed", v.significant, False,
                        f"disturbed: round(s) {', '.join(map(str, unresolved))} stayed disturbed "
                        f"after re-measuring ({r.n} clean rounds); not judged", v.resolving_power)
        return {"kind": kind, "base": base, "rung": other, "ratio": asdict(r),
                "verdict": asdict(v)}

    judged = [compare(base, other, kind) for kind, base, other in comparisons(ladder, measured)]
    steps = [c for c in judged if c["kind"] == "step"]
    vs_floor = [c for c in judged if c["kind"] == "vs_floor"]
    return {
        "quant": doc["quant"], "workload": doc["workload"], "threads": doc["threads"],
        "rungs": rungs, "round_statistic": statistic,
        "noise_floor": {"control": control, "twin": twin, "floor": floor,
                        "definition": "reach of the control/twin ratio's CI on the log scale: "
                                      "exp(max(|ln lo|, |ln hi|)) - 1",
                        "control_check": check,
                        "max_round_deviation": max_dev,
                        "control_vs_twin": asdict(floor_est) if floor_est else None},
        "steps": steps, "vs_floor": vs_floor,
        "disturbance": {"remeasured": len(dist.get("remeasured") or []),
                        "unresolved": unresolved,
                        "reasons": sorted({r for m in dist.get("remeasured") or []
                                           for r in m.get("reasons") or []})[:5]},
    }
