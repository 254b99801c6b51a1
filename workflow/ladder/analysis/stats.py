"""Paired ratios, their tests and intervals, and verdicts that count the noise once.

Every rung-over-rung ratio of a cell is paired by round (the rungs take turns inside a round, so
a round's drift hits both): the geometric mean of the per-round ratios, a Student t-interval on
the mean log ratio and the paired t-test of the same logs (Welch's for two unpaired sets: two
hosts, two runs). The t-interval's coverage is checked by simulation in tests/test_stats.py; the
estimator was chosen on real A/A series (measurements/resolving_power.py, README "Resolving
power").

A comparison is judged by its own paired data, once (issue 31):

- **faster / slower**: the paired test is significant (Benjamini-Hochberg across the run's
  comparisons, ``fdr_adjust``) *and* the estimate is at least the practical threshold δ of its
  phase (``stats.threshold``; prefill and decode apart). The call says what it holds: when its
  interval reaches inside ±δ it reads "faster, by less than δ not ruled out" (the estimate is
  not shown to be at least δ; near δ a called estimate is also biased up by the selection,
  issue 42);
- **equivalent**: the 1 - 2α (90 %) interval lies inside ±δ (two one-sided tests);
- **inconclusive** otherwise, with the smallest effect this comparison would call with 80 %
  power (``smallest_callable``).

A cell measured by the anytime-valid design (issue 56, ``measure.sequential``) is judged on
that design's repeated interval and repeated p-value (``ratio_ci(design_max=...)``), over every
round both rungs were measured in, δ on the interval: faster/slower by at least δ when the
interval lies wholly beyond ±δ, equivalent when wholly inside, "by less than δ not ruled out"
when it excludes 1 but reaches inside, else inconclusive; each comparison says why it stopped
being measured (``stop_record``).

Which rounds, and how independent (issue 42): a comparison reads the rounds in which the cell
measured one set of rungs (``protocol.regime_rounds``: the A/A check and the steps above the
floor the rounds after the floor retired, a comparison with the floor the rounds it ran in), and
every standard error allows for the dependence between rounds the run's A/A pairs show
(``run_dependence``: their autocorrelations at lags 1-3 pooled over the cells, a variance
factor).

The control and its twin (one build under two labels, interleaved like the rest) are a *check*,
not a band: a control/twin interval that excludes 1 means the cell measured one build as
different from itself (a label or position bias, a drift). Such a cell's intervals are widened by
that bias and it judges only gross steps (called at the interim looks' p ≤ 0.001): a 25x step is
still called, a moderate comparison reads "unjudged" with what it measured. The A/A figures (the
point |control/twin - 1|, its interval, the per-round SD, its standard error and the smallest
effect callable with 80 % power) are printed per cell, so a reader compares like with like.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from ladder.analysis import wording
from ladder.analysis.wording import METHOD, UNPAIRED_METHOD
from ladder.core.errors import LadderError
from ladder.planning.sequential import (comparison_key, look_critical, repeated_p,
                                        rounds_to_decide)
# the protocol's definitions, shared with the measurement (which never imports this module)
from ladder.planning.protocol import (
    ASSUMED_RHO,
    DEFAULT_THRESHOLD,
    INTERIM_ALPHA,
    MIN_ROUNDS,
    POWER,
    ROUND_STATISTICS,
    checked_statistic,
    clean_samples,
    comparisons,
    dependence_factor,
    paired_ratios,
    per_round_means,
    phase_of,
    retirable,
    smallest_callable,
    steady_ratios,
    t_quantile,
    threshold_for,
)

MAD_Z = 3.5  # Iglewicz & Hoaglin's modified z-score cut-off
CALLS = ("faster", "slower")


@dataclass(frozen=True)
class RatioEstimate:
    estimate: float | None  # geometric mean of the per-round ratios
    lo: float | None
    hi: float | None
    n: int
    per_round: list[float]
    confidence: float
    method: str = METHOD
    sd_log: float | None = None  # per-round SD of the log ratios (paired)
    se_log: float | None = None  # standard error of the mean log ratio
    df: float | None = None  # degrees of freedom of the t-distribution used
    p_value: float | None = None  # two-sided test of "no difference" (ratio 1)
    # a comparison of a cell measured by the anytime-valid design (issue 56): its interval is
    # the design's repeated interval at the look after n rounds (``sequential.look_critical``
    # of a design looking after every round up to ``design_max``), its p the repeated p-value
    design_max: int | None = None


@dataclass(frozen=True)
class Verdict:
    # faster | slower | equivalent | inconclusive | insufficient data | disturbed | no threshold
    call: str
    significant: bool  # the test rejects "no difference" (after the multiplicity adjustment)
    text: str
    # the smallest effect this comparison calls with 80 % power, at its rounds and threshold
    resolving_power: float | None = None
    threshold: float | None = None
    p_value: float | None = None
    adjusted: bool = False  # decided by the run's Benjamini-Hochberg step
    widened: float | None = None  # a failed control check's bias added to the interval (log)
    # a call whose printed interval lies wholly beyond the threshold ("at least δ faster"); a
    # call whose interval reaches inside it says "by less than δ not ruled out"
    beyond_threshold: bool | None = None
    interval: list[float] | None = None  # the printed interval (ratio scale)


def round_statistic(doc: Mapping[str, Any]) -> str:
    """The statistic a cell was measured for (cells from before it was recorded: the mean)."""
    return checked_statistic(str(doc.get("round_statistic") or "mean"))


def _tq(confidence: float, df: float) -> float:
    return t_quantile((1 + confidence) / 2, df)


def _p_value(mean: float, se: float, df: float, n: int = 0,
             design_max: int | None = None) -> float:
    """Two-sided p of "no difference": the paired t-test's, or for a comparison of the
    anytime-valid design the repeated p-value at the look after its ``n`` rounds."""
    if se == 0:
        return 0.0 if mean != 0 else 1.0
    if design_max:
        return repeated_p(abs(mean) / se, n, design_max)
    return float(2 * sps.t.sf(abs(mean) / se, df))


def _critical(confidence: float, df: float, n: int, design_max: int | None) -> float:
    if design_max:
        return look_critical(n, design_max, 1 - confidence)
    return _tq(confidence, df)


def critical(r: RatioEstimate, confidence: float) -> float:
    """The interval's critical value (standard errors) at ``confidence``: Student's t with the
    estimate's degrees of freedom, or, for a comparison of the anytime-valid design, the
    design's repeated interval at the look after its rounds (``sequential.look_critical``)."""
    return _critical(confidence, float(r.df or 1), r.n, r.design_max)


def _estimate(mean: float, se: float, df: float, n: int, per_round: list[float],
              confidence: float, method: str, sd: float | None,
              design_max: int | None = None) -> RatioEstimate:
    half = _critical(confidence, df, n, design_max) * se
    p = _p_value(mean, se, df, n, design_max)
    return RatioEstimate(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n,
                         per_round, confidence, method, sd, se, df, p, design_max)


def ratio_ci(ratios: Sequence[float], confidence: float = 0.95,
             factor: float = 1.0, grid_sd: float = 0.0,
             design_max: int | None = None) -> RatioEstimate:
    """Paired ratios: geometric mean, t-interval and paired t-test on the mean of their logs,
    the variance of the mean taken ``factor`` times sd²/n (dependent rounds: the run's measured
    factor, ``run_dependence``). ``grid_sd``: the per-round SD (log scale) that values read off
    a grid carry whatever they show (a capacity search's steps: ``load_view``), added in
    quadrature, so identical rounds never give a zero-width interval or p = 0.
    ``design_max``: the rounds were measured by the anytime-valid design looking after every
    round up to this many (``ladder.planning.sequential``): the interval is its repeated
    interval and the p its repeated p-value, valid however the cell chose to stop."""
    n = len(ratios)
    if n == 0:
        return RatioEstimate(None, None, None, 0, [], confidence)
    logs = np.log(np.asarray(ratios, dtype=float))
    if n < 2:
        return RatioEstimate(float(np.exp(logs.mean())), None, None, n, list(ratios), confidence)
    sd = math.hypot(float(logs.std(ddof=1)), grid_sd)
    factor = max(1.0, float(factor))
    se = sd / math.sqrt(n) * math.sqrt(factor)
    method = wording.method(factor, design_max)
    return _estimate(float(logs.mean()), se, n - 1, n, [float(r) for r in ratios], confidence,
                     method, sd, design_max)


def unpaired_ratio_ci(base: Sequence[float], other: Sequence[float],
                      confidence: float = 0.95, grid_sd: float = 0.0) -> RatioEstimate:
    """other/base for two independent sets of round means (e.g. two hosts, two runs): the
    ratio of their geometric means with a Welch t-interval and test on the difference of mean
    logs. ``n`` is the smaller side; ``per_round`` is empty (nothing pairs the rounds).
    ``grid_sd``: each value's SD from the grid it was read off (``ratio_ci``), added to each
    side's variance."""
    n = min(len(base), len(other))
    if n == 0 or min(base) <= 0 or min(other) <= 0:
        return RatioEstimate(None, None, None, n, [], confidence, UNPAIRED_METHOD)
    la, lb = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(other, dtype=float))
    diff = float(lb.mean() - la.mean())
    if n < 2:
        return RatioEstimate(math.exp(diff), None, None, n, [], confidence, UNPAIRED_METHOD)
    va = (float(la.var(ddof=1)) + grid_sd ** 2) / len(la)
    vb = (float(lb.var(ddof=1)) + grid_sd ** 2) / len(lb)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1)) if se else 1.0
    return _estimate(diff, se, df, n, [], confidence, UNPAIRED_METHOD, None)


def verdict(r: RatioEstimate, threshold: float | None, *, bias: float = 0.0,
            selected: bool | None = None, shown_confidence: float | None = None,
            bias_why: str | None = None) -> Verdict:
    """Judge one ratio (see the module's docstring).

    ``bias``: a failed control check's |ln(control/twin)|, added to the interval on both sides
    and taken off the estimate before the test (``bias_why`` names another source of it, e.g. a
    capacity search's resolution). ``selected``: the run's Benjamini-Hochberg
    decision (None: the comparison's own test at 1 - confidence). ``shown_confidence``: the
    level of the printed interval (a selected comparison's false-coverage-adjusted level).

    A comparison of the anytime-valid design (``r.design_max``) is judged on its repeated
    interval, δ on the interval (issue 56): faster/slower by at least δ when it lies wholly
    beyond ±δ, equivalent when wholly inside it, else as it stands when the cell stopped
    ("faster, by less than δ not ruled out" when it excludes 1, or inconclusive)."""
    if r.estimate is None or r.se_log is None or r.df is None or r.n < 3:
        return Verdict("insufficient data", False, wording.insufficient(r.n))
    if threshold is None:
        return Verdict("no threshold", False, wording.NO_THRESHOLD)
    alpha = 1 - r.confidence
    m, se, df = math.log(r.estimate), r.se_log, r.df
    band = math.log1p(threshold)
    shrunk = max(0.0, abs(m) - bias)
    p = _p_value(shrunk, se, df, r.n, r.design_max)
    significant = (p <= alpha) if selected is None else bool(selected and p <= alpha)
    conf = shown_confidence or r.confidence
    half = critical(r, conf) * se + bias
    lo, hi = math.exp(m - half), math.exp(m + half)
    mde = smallest_callable(se, df, alpha, threshold, bias=bias, crit=critical(r, r.confidence))
    ci = wording.interval(conf, lo, hi, bool(shown_confidence), bias, bias_why)
    common: dict[str, Any] = dict(resolving_power=mde, threshold=threshold, p_value=p,
                  adjusted=selected is not None, widened=bias or None, interval=[lo, hi])
    beyond = (lo >= math.exp(band)) if m > 0 else (hi <= math.exp(-band))
    if r.design_max:
        if significant and beyond:
            call = "faster" if m > 0 else "slower"
            return Verdict(call, True, wording.called(r.estimate, call, True, ci, p, threshold),
                           beyond_threshold=True, **common)
        if math.exp(-band) <= lo and hi <= math.exp(band):
            return Verdict("equivalent", significant,
                           wording.equivalent(threshold, conf, lo, hi), **common)
        if significant:
            call = "faster" if m > 0 else "slower"
            return Verdict(call, True, wording.called(r.estimate, call, False, ci, p, threshold),
                           beyond_threshold=False, **common)
        reason = "after_adjustment" if p <= alpha else "not_significant"
        return Verdict("inconclusive", False,
                       wording.inconclusive(reason, p, threshold, ci, wording.power(mde, POWER)),
                       **common)
    if significant and shrunk >= band:
        call = "faster" if m > 0 else "slower"
        return Verdict(call, True, wording.called(r.estimate, call, beyond, ci, p, threshold),
                       beyond_threshold=beyond, **common)
    t90 = _tq(1 - 2 * alpha, df) * se + bias
    if -band <= m - t90 and m + t90 <= band:
        return Verdict("equivalent", significant,
                       wording.equivalent(threshold, 1 - 2 * alpha, math.exp(m - t90),
                                          math.exp(m + t90)), **common)
    reason = ("under_threshold" if significant else
              "after_adjustment" if p <= alpha else "not_significant")
    return Verdict("inconclusive", significant,
                   wording.inconclusive(reason, p, threshold, ci, wording.power(mde, POWER)),
                   **common)


def control_check(ct: RatioEstimate | None, rejected: bool | None = None) -> dict[str, Any]:
    """One build cannot be faster than itself: a control/twin interval that excludes 1 fails
    the check (expected in 1 - confidence of honest cells; more often, a label or position bias
    or a drift). A failed check widens the cell's intervals by the bias it measured (``bias``,
    log scale), and the cell judges only gross steps (``judge``); it hides nothing.
    ``rejected``: the run's decision over all its cells' checks (``aa_family``) instead of
    this cell's own."""
    if ct is None or ct.lo is None or ct.hi is None or ct.estimate is None:
        return {"passed": None, "bias": 0.0, "text": wording.NO_CONTROL}
    passed = not (ct.lo > 1.0 or ct.hi < 1.0) if rejected is None else not rejected
    bias = 0.0 if passed else abs(math.log(ct.estimate))
    return {"passed": passed, "bias": bias,
            "text": wording.control_check(passed, ct.estimate, ct.confidence, ct.lo, ct.hi,
                                          bias)}


def aa_figures(ct: RatioEstimate | None, threshold: float) -> dict[str, Any] | None:
    """What the A/A pair of a cell says about its noise, in the units readers compare: the
    point |control/twin - 1| (one draw, as a single A/A run prints it), its interval, the
    per-round SD of the log ratio, its standard error, and the smallest effect the cell calls
    with 80 % power at its rounds and threshold."""
    if ct is None or ct.estimate is None:
        return None
    return {"point": abs(ct.estimate - 1), "estimate": ct.estimate, "ci": [ct.lo, ct.hi],
            "confidence": ct.confidence, "sd_per_round": ct.sd_log, "se": ct.se_log,
            "rounds": ct.n, "threshold": threshold,
            "smallest_callable": smallest_callable(
                ct.se_log, ct.df, 1 - ct.confidence, threshold,
                crit=critical(ct, ct.confidence))}


def interval_reach(r: RatioEstimate) -> float | None:
    """How far from 1 an interval reaches on the log scale, as a fraction (a fleet's A/A pair of
    runs: the drift floor that a cross-hardware comparison must also clear)."""
    if r.lo is None or r.hi is None or r.n < 2:
        return None
    return float(math.expm1(max(abs(math.log(r.lo)), abs(math.log(r.hi)))))


def max_round_deviation(ratios: Sequence[float]) -> float | None:
    """The largest single-round deviation of the control from its twin (reported, not used)."""
    return float(max(abs(r - 1.0) for r in ratios)) if ratios else None


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
    """Refuse to combine samples whose metadata disagree (pyperf's rule): the cell's (host,
    workload, threads, model) across all its samples, each rung's build across its own (rungs
    may be built from different sources: a patched or another version's rung says so in its
    build_commit)."""
    samples = doc["samples"]
    where = f"bench {doc['quant']}/{doc['workload']}/t{doc['threads']}"
    for key in ("hostname", "arch", "identity", "thp", "n_threads", "n_prompt", "n_gen",
                "n_depth", "model_size", "cpus"):
        values = {s.get(key) for s in samples}
        if len(values) > 1:
            raise LadderError(f"{where}: samples disagree on {key} ({sorted(map(str, values))}); "
                              "refusing to combine them")
    for key in ("build_key", "build_commit"):
        per_rung: dict[str, set[str]] = defaultdict(set)
        for s in samples:
            per_rung[s["rung"]].add(str(s.get(key)))
        for rung, values in per_rung.items():
            if len(values) > 1:
                raise LadderError(f"{where}: rung {rung} has samples that disagree on {key} "
                                  f"({sorted(values)}); refusing to combine them")


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


def cell_control(samples: Sequence[Mapping[str, Any]], control: str | None, twin: str | None,
                 confidence: float, statistic: str = "mean", factor: float = 1.0,
                 design_max: int | None = None
                 ) -> tuple[RatioEstimate | None, float | None]:
    """The cell's control/twin estimate over every round in which both were measured (the
    rounds with the floor included: every round a call of the cell rests on, issue 56) and the
    largest single-round deviation (None each when the control or its twin was not
    measured)."""
    measured = {s["rung"] for s in samples}
    if not (control and twin and control in measured and twin in measured):
        return None, None
    ct = paired_ratios(samples, twin, control, statistic)
    return ratio_ci(ct, confidence, factor, design_max=design_max), max_round_deviation(ct)


def position_effects(samples: Sequence[Mapping[str, Any]], statistic: str = "mean"
                     ) -> dict[int, list[float]]:
    """Per position in a round's order: the log deviations of the runs there from their rung's
    geometric mean in the cell. Orders are shuffled, so a position effect only adds noise to a
    ratio, but a large one is a finding of its own (pooled over the run by ``pooled_checks``)."""
    values: dict[str, dict[int, float]] = defaultdict(dict)
    pos: dict[tuple[str, int], int] = {}
    for s in samples:
        pos[(s["rung"], int(s["round"]))] = int(s.get("order", 0))
    for rung in sorted({s["rung"] for s in samples}):  # a report is the same on every run
        values[rung] = per_round_means(samples, rung, statistic)
    out: dict[int, list[float]] = defaultdict(list)
    for rung, rounds in values.items():
        if len(rounds) < 2:
            continue
        centre = float(np.mean(np.log(list(rounds.values()))))
        for rnd, v in rounds.items():
            out[pos[(rung, rnd)]].append(math.log(v) - centre)
    return dict(out)


def judge(comp: dict[str, Any], selected: bool | None = None,
          shown_confidence: float | None = None) -> dict[str, Any]:
    """A comparison's verdict from what it carries (ratio, threshold, bias and ``bias_why``,
    disturbance, ``no_equivalence``), so the run-level adjustment re-judges it exactly as the
    cell did."""
    r = RatioEstimate(**comp["ratio"])
    v = verdict(r, comp["threshold"], bias=comp.get("bias") or 0.0, selected=selected,
                shown_confidence=shown_confidence, bias_why=comp.get("bias_why"))
    if comp.get("stop"):  # the anytime-valid design: how many rounds it took, and why
        v = replace(v, text=wording.with_stop(v.text, comp["stop"]["text"]))
    why_not = comp.get("no_equivalence")
    if why_not and v.call == "equivalent":  # e.g. censored values: they only hide differences
        v = replace(v, call="inconclusive", text=wording.not_equivalent(why_not, v.text))
    unresolved = comp.get("unresolved") or []
    if unresolved and v.call in ("insufficient data", "equivalent", "inconclusive"):
        # too few clean rounds, or no answer: the machine's fault, and said so
        v = replace(v, call="disturbed", text=wording.disturbed(unresolved, r.n))
    elif comp.get("control_failed") and v.call in CALLS + ("equivalent", "inconclusive") \
            and not gross(v):
        # widening by the measured bias restores too little coverage for a moderate effect
        # (issue 42: 86 % to 88 % in simulation); a gross step still stands
        v = replace(v, call="unjudged", significant=False,
                    text=wording.unjudged(INTERIM_ALPHA, v.text))
    return asdict(v)


def gross(v: Verdict) -> bool:
    """A call that holds at the strict interim level (what an early look retires)."""
    return v.call in CALLS and v.p_value is not None and v.p_value <= INTERIM_ALPHA


def summarize_cell(doc: Mapping[str, Any], ladder: Sequence[str], control: str | None,
                   twin: str | None, confidence: float = 0.95, resamples: int = 10000,
                   seed: int = 0, thresholds: float | Mapping[str, float] | None = None,
                   factor: float = 1.0, extra: Sequence[tuple[str, str, str]] = ()
                   ) -> dict[str, Any]:
    """Per-rung summaries, the A/A check and figures, and the step verdicts of one measured
    cell, each comparison judged on its own (``fdr_adjust`` then adjusts across the run) over
    its rounds of one measured set (``steady_ratios``), its variances ``factor`` times those of
    independent rounds (the run's dependence, ``run_dependence``). In a cell whose control
    check failed only gross steps are judged (``judge``). ``extra``: (kind, base, rung)
    comparisons outside the ladder's, judged by the same rule and returned apart, in no
    multiplicity family (a bisection's bad end over the good build's second label: a check
    its call must also pass, ``reporting.bisect``)."""
    statistic = round_statistic(doc)
    check_combinable(doc)
    # a disturbed attempt was measured again (bench.measure): its samples never count
    samples = clean_samples(doc["samples"])
    dist = doc.get("disturbance") or {}
    unresolved = list(dist.get("unresolved") or [])
    measured = {s["rung"] for s in samples}
    names = list(ladder) + ([control] if control else [])
    rungs = {n: rung_summary(samples, n, confidence, resamples, seed, statistic) for n in names}
    phase = doc_phase(doc, samples)
    delta = threshold_for(thresholds, phase)
    seq = doc.get("sequential") or None
    design = int(seq["max"]) if seq else None
    ct, max_dev = cell_control(samples, control, twin, confidence, statistic, factor, design)
    check = control_check(ct)
    aa = aa_figures(ct, delta)

    def compare(base: str, other: str, kind: str) -> dict[str, Any]:
        # the anytime-valid design reads every round both were measured in (its looks did)
        ratios = (paired_ratios(samples, base, other, statistic) if seq
                  else steady_ratios(samples, base, other, statistic))
        r = ratio_ci(ratios, confidence, factor, design_max=design)
        comp = {"kind": kind, "base": base, "rung": other, "ratio": asdict(r),
                "threshold": delta, "bias": check["bias"], "unresolved": unresolved,
                "control_failed": check["passed"] is False,
                **({"stop": stop_record(seq, kind, base, other, r, delta, factor)}
                   if seq else {})}
        comp["verdict"] = judge(comp)
        return comp

    judged = [compare(base, other, kind) for kind, base, other in comparisons(ladder, measured)]
    extras = [compare(base, other, kind) for kind, base, other in extra
              if base in measured and other in measured]
    return {
        "quant": doc["quant"], "workload": doc["workload"], "threads": doc["threads"],
        "rungs": rungs, "round_statistic": statistic, "phase": phase,
        "noise_floor": {"control": control, "twin": twin,
                        # the smallest effect this cell calls with 80 % power (A/A spread,
                        # rounds, threshold): what "resolving power" means in the report
                        "floor": aa["smallest_callable"] if aa else None,
                        "definition": wording.NOISE_FLOOR_DEFINITION,
                        "threshold": delta, "aa": aa, "control_check": check,
                        "text": wording.aa_text(aa, control, twin, doc.get("rounds_plan"),
                                                POWER) + wording.cell_stop(seq, ct.n if ct
                                                                           else 0),
                        "rounds_plan": doc.get("rounds_plan"),
                        "stop": (stop_record(seq, "aa", twin, control, ct, delta, factor)
                                 if seq and ct and twin and control else None),
                        "max_round_deviation": max_dev,
                        "control_vs_twin": asdict(ct) if ct else None},
        "positions": {str(k): v for k, v in sorted(position_effects(samples, statistic).items())},
        "steps": [c for c in judged if c["kind"] == "step"],
        "vs_floor": [c for c in judged if c["kind"] == "vs_floor"],
        **({"extra": extras} if extra else {}),
        "disturbance": {"remeasured": len(dist.get("remeasured") or []),
                        "unresolved": unresolved,
                        "reasons": sorted({r for m in dist.get("remeasured") or []
                                           for r in m.get("reasons") or []})[:5]},
    }


def stop_record(seq: Mapping[str, Any], kind: str, base: str, other: str,
                r: RatioEstimate, threshold: float, factor: float) -> dict[str, Any]:
    """Why a comparison of the anytime-valid design stopped being measured, from the cell's
    record (``harness.sequential_meta``): decided at a look (with what the look decided, under
    the dependence the cell allowed for), or still open when the cell stopped (its budget, the
    design's maximum, or a rung that failed). An open one says how many rounds, and minutes
    at the cell's pace, would decide it at the noise and effect it measured
    (``rounds_to_decide``); one closed for futility (``sequential.out_of_reach``) is open too,
    stopped at the look that found it out of reach."""
    rec = (seq.get("decided") or {}).get(comparison_key(kind, base, other))
    d = rec
    if d and d.get("decision") == "futile":  # closed out of the design's reach: as it stands
        why, d = "futile", None
    elif d:
        why = "decided"
    else:
        why = str(seq.get("stopped") or "cap")
        if why == "decided":  # the cell stopped on its other comparisons
            # the A/A pair (or a check outside the ladder, ``summarize_cell``'s ``extra``)
            # checks the calls' rounds; any other comparison: a rung failed
            why = "calls decided" if kind in ("aa", "twin") else "rung failed"
    need = None
    if not d and r.estimate and r.sd_log is not None:
        need = rounds_to_decide(math.log(r.estimate), r.sd_log, factor, int(seq["max"]),
                                float(seq.get("alpha") or 0.05), threshold)
    per_round = (float(seq.get("spent_s") or 0) / seq["measured_rounds"]
                 if seq.get("measured_rounds") else None)
    return {"rounds": r.n, "why": why, "at": rec.get("at") if rec else None,
            "decision": d.get("decision") if d else None, "max": int(seq["max"]),
            "rounds_to_decide": need, "per_round_s": per_round,
            "text": wording.stop(why, r.n, d.get("decision") if d else None,
                                 seq.get("budget_s"), int(seq["max"]), need, per_round)}


def budget_summary(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The run's comparisons by why they stopped being measured (cells of the anytime-valid
    design only; None without any), and what the open ones would need: per cell, the most
    rounds one of its open comparisons needs beyond what it had, in minutes at the cell's pace
    (None where an effect sits on ±δ and no rounds decide it)."""
    counts: dict[str, int] = defaultdict(int)
    open_: list[dict[str, Any]] = []
    extra_s, unreachable = 0.0, 0
    seen = False
    for c in cells:
        worst: float | None = 0.0
        for comp in list(c.get("steps") or []) + list(c.get("vs_floor") or []):
            st = comp.get("stop")
            if not st:
                continue
            seen = True
            counts[st["why"]] += 1
            if st["why"] not in ("budget", "cap", "futile"):
                continue
            name = wording.comparison_name(c["quant"], c["workload"], c["threads"],
                                           comp["rung"], comp["base"])
            open_.append({"comparison": name, "why": st["why"], "rounds": st["rounds"],
                          "rounds_to_decide": st.get("rounds_to_decide")})
            need = st.get("rounds_to_decide")
            if need is None or worst is None:
                worst = None
            elif st.get("per_round_s"):
                worst = max(worst, (need - st["rounds"]) * float(st["per_round_s"]))
        if worst is None:
            unreachable += 1
        else:
            extra_s += worst
    if not seen:
        return None
    return {"by_reason": dict(counts), "open": open_, "extra_minutes": round(extra_s / 60, 1),
            "cells_unreachable": unreachable,
            "text": wording.budget_summary(dict(counts), open_, extra_s / 60, unreachable)}


def summarize(doc: Mapping[str, Any], ladder: Sequence[str], control: str | None,
              twin: str | None, stats_cfg: Mapping[str, Any],
              confidence: float | None = None, extra: Sequence[tuple[str, str, str]] = ()
              ) -> dict[str, Any]:
    """``summarize_cell`` with the run's statistics settings (the config's ``stats`` block and
    the run's ``dependence_factor``, ``with_dependence``)."""
    return summarize_cell(doc, ladder, control, twin,
                          confidence=confidence or stats_cfg["confidence"],
                          resamples=stats_cfg["bootstrap_resamples"], seed=stats_cfg["seed"],
                          thresholds=stats_cfg.get("threshold"),
                          factor=cell_factor(doc, stats_cfg), extra=extra)


def cell_factor(doc: Mapping[str, Any], stats_cfg: Mapping[str, Any]) -> float:
    """The dependence factor a cell's standard errors take: its phase's (``with_dependence``),
    else the run's."""
    by_phase = stats_cfg.get("dependence_by_phase") or {}
    return float(by_phase.get(doc_phase(doc), stats_cfg.get("dependence_factor", 1.0)))


def doc_phase(doc: Mapping[str, Any],
              samples: Sequence[Mapping[str, Any]] | None = None) -> str:
    """A measured cell's phase (prefill or decode), from its workload (else from its first
    sample's: ``samples``, the doc's own by default)."""
    first = next(iter(doc.get("samples") or [] if samples is None else samples), None)
    spec = doc.get("workload_spec") or (
        {"n_prompt": first.get("n_prompt"), "n_gen": first.get("n_gen")} if first else {})
    return phase_of(spec)


def with_dependence(stats_cfg: Mapping[str, Any], dependence: Mapping[str, Any]
                    ) -> dict[str, Any]:
    """The statistics settings a run's summaries take: the config's, and the variance factors
    its A/A pairs measured (``run_dependence``): a bench cell takes its phase's; a summary that
    has no phase (the serving sections) the largest of them."""
    by_phase = {ph: d["factor"] for ph, d in (dependence.get("by_phase") or {}).items()}
    return {**stats_cfg, "dependence_factor": dependence["factor"],
            "dependence_by_phase": by_phase}


MIN_LAG_PAIRS = 30  # fewer pooled lag-1 pairs: the run's dependence is not estimated
LAGS = 3  # the lags whose autocorrelations the run's variance factor sums
MIN_SERIES = 10  # a shorter A/A series does not enter the pool (its bias correction explodes)


def aa_series(doc: Mapping[str, Any], control: str | None, twin: str | None) -> list[float]:
    """A cell's A/A log ratios, log(control/twin), in round order over every round in which
    both were measured (what its control check reads)."""
    if not (control and twin):
        return []
    samples = clean_samples(doc.get("samples") or [])
    return [math.log(x) for x in paired_ratios(samples, twin, control, round_statistic(doc))]


def run_dependence(docs: Iterable[Mapping[str, Any]], control: str | None, twin: str | None,
                   confidence: float = 0.95) -> dict[str, Any]:
    """How dependent a run's rounds are, measured on its A/A pairs (one build under two labels:
    whatever their ratio carries from round to round is the machine's), per phase: prefill and
    decode cells can differ (the 2026-12-07 default run: a factor of 2.04 in prefill, 1.00 in
    decode), so each is estimated from its own cells (``pooled_dependence``) and a bench cell
    takes its phase's. The run's ``factor`` (what a summary without a phase takes: the serving
    sections) is the largest of the phases'."""
    by_phase: dict[str, list[list[float]]] = defaultdict(list)
    for doc in docs:
        by_phase[doc_phase(doc)].append(aa_series(doc, control, twin))
    phases = {ph: pooled_dependence(series, confidence) for ph, series in sorted(by_phase.items())}
    if not phases:
        return {**pooled_dependence([], confidence), "by_phase": {}}
    factor = max(d["factor"] for d in phases.values())
    text = wording.dependence_by_phase({ph: d["text"] for ph, d in phases.items()}, factor)
    return {"cells": sum(d["cells"] for d in phases.values()),
            "pairs": sum(d["pairs"] for d in phases.values()), "lags": LAGS,
            "method": wording.dependence_method(LAGS) + ", per phase",
            "measured": any(d["measured"] for d in phases.values()),
            "factor": factor, "by_phase": phases, "text": text}


def pooled_dependence(series: Iterable[Sequence[float]], confidence: float = 0.95
                      ) -> dict[str, Any]:
    """The variance factor of a set of A/A series (their cells' control/twin log ratios in
    round order): the autocorrelations r_j at lags 1-``LAGS`` of each series about its mean,
    pooled over the series, give the variance factor of a mean of n rounds,
    (1 + 2·Σr_j) / (1 - 2·LAGS/n) (the denominator undoes the bias of autocorrelations about an
    estimated mean: 1 for independent rounds on average), never below 1, that every standard
    error of those cells takes. A run-level calibration: a cell's 12-28 rounds cannot measure
    it, a run's hundreds of pairs can. Chosen over an AR(1) factor from lag 1 alone, which left
    8-10 % of cells failing the A/A check when a label was shifted for 5 rounds (this one: 5-6
    %, at an average cost of x1.05 on the standard error of independent rounds; simulated in
    tests/test_stats.py, and measured on real A/A series by measurements/dependence.py). Fewer
    than ``MIN_LAG_PAIRS`` lag-1 pairs: ``protocol.ASSUMED_RHO``, the bound measured on this
    project's real runs, as the looks and the pilot use it."""
    num = np.zeros(LAGS + 1)
    pairs = cells = rounds = 0
    for one in series:
        x = np.asarray(one)
        if len(x) < MIN_SERIES:
            continue
        d = x - x.mean()
        for j in range(LAGS + 1):
            num[j] += float((d[j:] * d[:len(d) - j]).sum())
        pairs += len(x) - 1
        cells += 1
        rounds += len(x)
    out: dict[str, Any] = {"cells": cells, "pairs": pairs, "lags": LAGS,
                           "method": wording.dependence_method(LAGS)}
    if pairs < MIN_LAG_PAIRS or num[0] <= 0:
        factor = dependence_factor(ASSUMED_RHO)
        out.update(rho=None, ci=None, factor=factor, measured=False,
                   text=wording.dependence_assumed(pairs, MIN_LAG_PAIRS, ASSUMED_RHO, factor))
        return out
    rho = [float(num[j] / num[0]) for j in range(1, LAGS + 1)]
    half = _tq(confidence, pairs) / math.sqrt(pairs)
    factor = max(1.0, (1 + 2 * sum(rho)) / (1 - 2 * LAGS / (rounds / cells)))
    ci = [rho[0] - half, rho[0] + half]
    out.update(rho=rho, ci=ci, factor=factor, measured=True, mean_rounds=rounds / cells,
               text=wording.dependence_measured(rho, ci, confidence, pairs, cells, factor))
    return out


def aa_family(cells: Sequence[dict[str, Any]], confidence: float = 0.95) -> dict[str, Any]:
    """The run's A/A checks as one Benjamini-Hochberg family (issue 56): with six cells and
    every check at its own 5 %, one fails in 26 % of honest runs. A cell's check fails only
    when the run's step over all its cells' control/twin tests rejects it; a check that this
    changes is re-stated and the cell's comparisons re-judged (its bias and the gross-only
    rule go with the check). Returns what it did, for the report."""
    q = 1 - confidence
    checked = [c for c in cells
               if ((c.get("noise_floor") or {}).get("control_vs_twin") or {}).get("p_value")
               is not None]
    rejected = benjamini_hochberg([c["noise_floor"]["control_vs_twin"]["p_value"]
                                   for c in checked], q) if checked else []
    changed = 0
    for cell, rej in zip(checked, rejected):
        nf = cell["noise_floor"]
        check = control_check(RatioEstimate(**nf["control_vs_twin"]), rejected=rej)
        if check["passed"] == nf["control_check"]["passed"]:
            continue
        changed += 1
        nf["control_check"] = check
        for comp in list(cell.get("steps") or []) + list(cell.get("vs_floor") or []):
            comp["bias"] = check["bias"]
            comp["control_failed"] = check["passed"] is False
            comp["verdict"] = judge(comp)
    return {"method": "Benjamini-Hochberg", "q": q, "checks": len(checked),
            "failed": sum(rejected), "changed": changed,
            "text": wording.aa_family(len(checked), sum(rejected), q)}


def benjamini_hochberg(p_values: Sequence[float], q: float) -> list[bool]:
    """Which hypotheses Benjamini-Hochberg rejects at false-discovery rate ``q``."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    k = 0
    for rank, i in enumerate(order, start=1):
        if p_values[i] <= rank * q / m:
            k = rank
    cut = p_values[order[k - 1]] if k else -1.0
    return [p <= cut for p in p_values]


FLOOR_FAMILY = "with the floor"
ABOVE_FAMILY = "above the floor"


def fdr_adjust(cells: Sequence[dict[str, Any]], confidence: float = 0.95,
               floor: str | None = None) -> dict[str, Any]:
    """Multiplicity across a run: every comparison's test enters a Benjamini-Hochberg step at
    q = 1 - confidence; only a rejected one may be called faster or slower, and its printed
    interval is the false-coverage-rate adjusted one (Benjamini & Yekutieli 2005: level
    1 - R·q/m for R selected of m). A step that is also a vs-floor comparison counts once.

    With ``floor`` (the ladder's first rung) there are two families, declared before anything
    is measured: the comparisons with the floor (gross by design: the generic build far below
    every other rung) and those between rungs above it (the moderate questions: a vendor
    library over repack, a patch over its base). In one family the gross steps' discoveries
    raise BH's cut-off for every other test, so a moderate comparison among many gross ones
    is tested at about the unadjusted level (issue 42). Re-judges the cells' comparisons in
    place; returns what it did, for the report."""
    q = 1 - confidence
    families: dict[str, dict[tuple[int, str, str], list[dict[str, Any]]]] = {}
    for i, cell in enumerate(cells):
        for comp in list(cell.get("steps") or []) + list(cell.get("vs_floor") or []):
            if comp["verdict"].get("p_value") is None:  # no test (too few rounds)
                continue
            name = ("all" if floor is None else
                    FLOOR_FAMILY if floor in (comp["base"], comp["rung"]) else ABOVE_FAMILY)
            families.setdefault(name, {}).setdefault((i, comp["base"], comp["rung"]),
                                                     []).append(comp)
    did = []
    for name in ([FLOOR_FAMILY, ABOVE_FAMILY] if floor is not None else ["all"]):
        unique = families.get(name, {})
        keys = list(unique)
        # the cell's own verdict already tested the estimate less any control bias
        p = [unique[k][0]["verdict"]["p_value"] for k in keys]
        rejected = benjamini_hochberg(p, q) if keys else []
        n_sel = sum(rejected)
        shown = 1 - n_sel * q / len(keys) if n_sel else None
        for k, sel in zip(keys, rejected):
            for comp in unique[k]:
                comp["verdict"] = judge(comp, selected=sel,
                                        shown_confidence=shown if sel else None)
                comp["family"] = name
        did.append({"family": name, "comparisons": len(keys), "rejected": n_sel,
                    "interval_confidence_selected": shown})

    text = wording.multiplicity(did, q, floor)
    return {"method": "Benjamini-Hochberg", "q": q,
            "comparisons": sum(f["comparisons"] for f in did),
            "rejected": sum(f["rejected"] for f in did),
            "interval_confidence_selected": did[0]["interval_confidence_selected"]
            if len(did) == 1 else None,
            "families": did, "text": text}


def pooled_checks(cells: Sequence[Mapping[str, Any]], confidence: float = 0.95
                  ) -> dict[str, Any]:
    """The A/A check pooled across a run's cells: a label bias (the control faster or slower
    than its twin on average; cells are the units, so one noisy cell weighs as one) and a
    position bias (runs at one place in the round's order faster than their rung's average;
    runs are the units, Bonferroni over the positions). Each flags; neither hides a result."""
    means = [float(np.mean(np.log(c["noise_floor"]["control_vs_twin"]["per_round"])))
             for c in cells
             if (c.get("noise_floor") or {}).get("control_vs_twin")
             and len(c["noise_floor"]["control_vs_twin"]["per_round"]) >= 2]
    out: dict[str, Any] = {"confidence": confidence}
    if len(means) >= 3:
        r = ratio_ci([math.exp(x) for x in means], confidence)
        failed = bool(r.lo is not None and (r.lo > 1 or r.hi < 1))  # type: ignore[operator]
        out["label"] = {"cells": len(means), "estimate": r.estimate, "ci": [r.lo, r.hi],
                        "p_value": r.p_value, "passed": not failed,
                        "text": wording.label_check(len(means), r.estimate, r.lo, r.hi,  # type: ignore[arg-type]
                                                    confidence, failed)}
    else:
        out["label"] = {"cells": len(means), "passed": None,
                        "text": wording.label_needs(len(means))}
    by_pos: dict[int, list[float]] = defaultdict(list)
    for c in cells:
        for k, v in (c.get("positions") or {}).items():
            by_pos[int(k)] += v
    rows: list[dict[str, Any]] = []
    alpha = (1 - confidence) / max(1, len(by_pos))
    for k in sorted(by_pos):
        v = np.asarray(by_pos[k])
        if len(v) < 3:
            continue
        se = float(v.std(ddof=1)) / math.sqrt(len(v))
        lo, hi = (float(math.expm1(v.mean() + s * _tq(1 - alpha, len(v) - 1) * se))
                  for s in (-1, 1))
        rows.append({"position": k, "runs": len(v), "effect": float(math.expm1(v.mean())),
                     "ci": [lo, hi], "flag": lo > 0 or hi < 0})
    flagged = [r for r in rows if r["flag"]]
    out["position"] = {"rows": rows, "passed": not flagged if rows else None,
                       "text": wording.position_check(rows)}
    return out
