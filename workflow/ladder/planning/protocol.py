"""The measurement protocol: what a round is worth, which comparisons a cell makes, and when an
early look may retire a rung (Haybittle-Peto). Shared by the measurement
(``ladder.measuring.bench``) and the analysis (``ladder.analysis.stats``), so the analysis can change without re-measuring (issue 32):
a measuring rule's identity reaches this module, never ``ladder.analysis.stats``.

``VERSION`` is the protocol's explicit version (asv's benchmark_version): bump it when the way of
measuring changes, and every cell is measured again; a change of the statistics, the report or
a comment re-runs only the analysis, from the kept raw samples.
"""

from __future__ import annotations

import math
import secrets
from collections import defaultdict
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, cast

import numpy as np
from scipy import stats as sps

from ladder.core.errors import LadderError

if TYPE_CHECKING:  # a type only: the plan stays the dict it is (code identity leaves it out)
    from ladder.core.records import RoundsPlan

# 2: rounds chosen per cell from its pilot's A/A spread (measure.rounds_from_noise); 3: the
# looks and the pilot read the rounds of one measured set (``regime_rounds``) and allow for
# dependent rounds (``ASSUMED_RHO``), and the planned rounds count from the last retirement; 4:
# every measuring experiment through one harness (issue 44): the serving experiments' processes
# pinned to the cell's CPUs and their disturbed rounds measured again, as the bench cells' were;
# 5: the anytime-valid design (issue 56): a look after every round, each comparison measured
# until it is decided, within the cell's share of the run's budget
VERSION = 5
# The practical threshold below which a change is not called, per phase (measured A/A bias and
# the effects users ask about; docs/statistics.md).
DEFAULT_THRESHOLD = {"prefill": 0.05, "decode": 0.03}
# Early looks only retire a rung whose every comparison is called at this strict level
# (Haybittle-Peto): the final analysis keeps its nominal level.
INTERIM_ALPHA = 0.001
MIN_ROUNDS = 3  # the fewest paired rounds a comparison is judged on
POWER = 0.80  # the power at which "the smallest effect this cell calls" is stated
PLAN_ALPHA = 0.05  # the two-sided level the rounds are planned for (stats.confidence 0.95)
# Rounds are not independent when the machine has slow modes: a paired t on n rounds assumes
# they are (issue 42). The final analysis measures the dependence of a run's A/A series
# (``stats.run_dependence``); a look and the pilot, inside one cell, cannot, and allow for this
# lag-1 autocorrelation of the per-round log ratios (an AR(1) model): the upper 95 % limit of
# the pooled estimate on this project's real A/A rounds, +0.050 over 1550 pairs of rounds in 66
# cells of 6 runs (estimate +0.001; measurements/dependence.py, docs/moderate-effects.md).
ASSUMED_RHO = 0.05

# What one round of one rung is worth, from its process's llama-bench repetitions (-r): every
# repetition is kept as a sample; the statistic is chosen by measurement
# (measurements/round_statistic.py) and recorded in each cell ("round_statistic").
ROUND_STATISTICS: dict[str, Callable[[Sequence[float]], Any]] = {
    "mean": np.mean, "median": np.median, "best": np.max}


def checked_statistic(name: str) -> str:
    if name not in ROUND_STATISTICS:
        raise LadderError(f"round_statistic {name!r}: not one of {sorted(ROUND_STATISTICS)}")
    return name


def clean_samples(samples: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The samples a look, the pilot or the analysis reads: no warmup round, no disturbed
    attempt (it was measured again)."""
    return [s for s in samples if not s.get("warmup") and not s.get("disturbed")]


def measured_records(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A result file without its warmup and disturbed records (``clean_samples`` over its
    samples, a load's level rows and its requests): what a serving view reads."""
    return {**doc, **{k: clean_samples(doc[k]) for k in ("samples", "levels", "requests")
                      if isinstance(doc.get(k), list)}}


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
                  statistic: str = "mean", rounds: Iterable[int] | None = None) -> list[float]:
    """other/base per round, over the rounds in which both were measured (of ``rounds``, when
    given)."""
    a = per_round_means(samples, base, statistic)
    b = per_round_means(samples, other, statistic)
    both = set(a) & set(b) & (set(rounds) if rounds is not None else set(a))
    return [b[r] / a[r] for r in sorted(both) if a[r] > 0]


def measured_sets(samples: Iterable[Mapping[str, Any]]) -> dict[int, frozenset[str]]:
    """The rungs measured in each round (a retired rung leaves the set)."""
    acc: dict[int, set[str]] = defaultdict(set)
    for s in samples:
        acc[int(s["round"])].add(s["rung"])
    return {r: frozenset(v) for r, v in acc.items()}


def regime_rounds(samples: Sequence[Mapping[str, Any]], base: str, other: str) -> list[int]:
    """The rounds a comparison of ``base`` and ``other`` is judged on (issue 42): those in which
    both were measured *and* the cell measured the same set of rungs as in the last such round.
    While the slow floor still runs, a rung that follows it in a round's order may be measured
    in another state of the machine (seen in one real run, not beyond chance over six:
    docs/moderate-effects.md), so the control/twin check and the steps above the floor read the
    rounds after the floor retired, and the comparisons with the floor the rounds it ran in. Fewer than ``MIN_ROUNDS`` such rounds: every round with both."""
    sets = measured_sets(samples)
    both = sorted(r for r, v in sets.items() if base in v and other in v)
    if not both:
        return []
    same = [r for r in both if sets[r] == sets[both[-1]]]
    return same if len(same) >= MIN_ROUNDS else both


def steady_ratios(samples: Sequence[Mapping[str, Any]], base: str, other: str,
                  statistic: str = "mean") -> list[float]:
    """other/base per round over the comparison's rounds of one measured set
    (``regime_rounds``)."""
    return paired_ratios(samples, base, other, statistic, regime_rounds(samples, base, other))


def dependence_factor(rho: float) -> float:
    """How much the variance of a mean of n rounds exceeds sd²/n when the rounds follow an AR(1)
    model with lag-1 autocorrelation ``rho`` (n large; for the n of a cell the exact factor is
    a little smaller, so this errs wide): (1 + ρ) / (1 - ρ), never below 1."""
    r = min(max(float(rho), 0.0), 0.9)
    return (1 + r) / (1 - r)


def phase_of(workload: Mapping[str, Any]) -> str:
    """decode for a pure generation workload (tgN, tgN at depth), else prefill."""
    return "decode" if workload.get("n_gen") and not workload.get("n_prompt") else "prefill"


def threshold_for(thresholds: float | Mapping[str, float] | None, phase: str) -> float:
    """δ of a phase: one number, or one per phase (stats.threshold); the default otherwise."""
    if thresholds is None:
        return DEFAULT_THRESHOLD[phase]
    if isinstance(thresholds, Mapping):
        return float(thresholds.get(phase, DEFAULT_THRESHOLD[phase]))
    return float(thresholds)


def run_seed(seed: int | None) -> tuple[int, str]:
    """The seed a measurement draws its round orders (and a load's arrivals) from, and where it
    came from: ``measure.seed`` when set (to reproduce a recorded measurement), else a fresh one
    per measurement (a fixed default reused every cell's order sequence run after run, so an
    offset tied to an order recurred in the same cells). Recorded with the samples either way."""
    if seed is not None:
        return int(seed), "measure.seed"
    return secrets.randbits(32), "fresh"


def serving_policy(measure: Mapping[str, Any], serving: Mapping[str, Any]) -> dict[str, Any]:
    """How every serving experiment is measured (``harness.policy_from``), beside the bench's:
    the serving rounds and timeout, no warm-up round, one process per rung and round (its
    round the mean of its requests), a warm-up request in each, the llama-bench points on the
    bench cells' anytime-valid design up to ``serving.max_rounds``, and the bench cells'
    seed, disturbance limits and CPU placement."""
    return {
        "rounds": serving["rounds"],
        "timeout_s": serving["timeout_s"],
        "warmup_rounds": 0,
        "repetitions": 1,
        "round_statistic": "mean",
        "warmup": True,
        "sequential": {**measure["sequential"], "max": serving["max_rounds"]},
        **{k: measure[k] for k in ("seed", "disturbance", "cpus")},
    }


def comparisons(ladder: Sequence[str], measured: set[str]) -> list[tuple[str, str, str]]:
    """(kind, base, rung) a cell judges: each measured rung over the one before it ("step"),
    and each over the floor when the floor was measured ("vs_floor")."""
    present = [n for n in ladder if n in measured]
    out = [("step", a, b) for a, b in zip(present, present[1:])]
    if ladder and ladder[0] in measured:
        out += [("vs_floor", ladder[0], b) for b in present[1:]]
    return out


def grid_comparisons(ladder: Sequence[str], grid: Mapping[str, tuple[str, int]],
                     measured: set[str]) -> list[tuple[str, str, str]]:
    """(kind, base, entry) a reconciliation cell judges, its entries (rung, threads) pairs
    (``grid``: entry name -> (rung, threads), ``ladder``: the entries in rung order): at each
    thread count each measured rung over the one before it ("step"), and within each rung each
    thread count over the next smaller one ("threads"), so that every rung's best count and
    every step between counts rest on paired rounds."""
    present = [n for n in ladder if n in measured and n in grid]
    out: list[tuple[str, str, str]] = []
    for t in sorted({grid[n][1] for n in present}):
        row = [n for n in present if grid[n][1] == t]
        out += [("step", a, b) for a, b in zip(row, row[1:])]
    for rung in dict.fromkeys(grid[n][0] for n in present):
        col = sorted((n for n in present if grid[n][0] == rung), key=lambda n: grid[n][1])
        out += [("threads", a, b) for a, b in zip(col, col[1:])]
    return out


def gross_step(ratios: Sequence[float], threshold: float, alpha: float,
               rho: float = ASSUMED_RHO) -> bool:
    """Called at level ``alpha`` already: the paired t-test on the log ratios rejects "no
    difference" at ``alpha`` and the geometric mean is beyond the threshold (the final
    analysis's rule, ``stats.verdict``, at the strict interim level), its standard error allowing
    for rounds correlated at ``rho`` (``dependence_factor``)."""
    if len(ratios) < MIN_ROUNDS:
        return False
    logs = np.log(np.asarray(ratios, dtype=float))
    m, sd = float(logs.mean()), float(logs.std(ddof=1))
    se = sd / math.sqrt(len(logs)) * math.sqrt(dependence_factor(rho))
    p = (0.0 if m != 0 else 1.0) if se == 0 else float(2 * sps.t.sf(abs(m) / se, len(logs) - 1))
    return p <= alpha and abs(m) >= math.log1p(threshold)


def retirable(samples: Sequence[Mapping[str, Any]], ladder: Sequence[str],
              keep: Iterable[str], threshold: float, alpha: float = INTERIM_ALPHA,
              statistic: str = "mean") -> set[str]:
    """At an early look (pure): the rungs every comparison of which is already a gross step
    called at the strict interim level ``alpha``. A rung is never retired because a comparison
    looked equivalent or inconclusive, and ``keep`` (the control and its twin, whose A/A check
    needs every round) never is."""
    measured = {s["rung"] for s in samples}
    open_rungs: set[str] = set(keep)
    seen: set[str] = set()
    for _, base, other in comparisons(ladder, measured):
        seen |= {base, other}
        if not gross_step(steady_ratios(samples, base, other, statistic), threshold, alpha):
            open_rungs |= {base, other}
    return seen - open_rungs


def smallest_callable(se: float | None, df: float | None, alpha: float, threshold: float,
                      power: float = POWER, bias: float = 0.0,
                      crit: float | None = None) -> float | None:
    """The smallest true effect (a fraction) that a comparison with this standard error (log
    scale) calls faster with probability ``power``: the estimate must clear both the test's
    critical value and the threshold, so exp(max(ln(1 + δ), t·se) + bias + t_power·se) - 1.
    ``crit``: the critical value in place of Student's t (a repeated interval's, issue 56)."""
    if se is None or df is None or df < 1:
        return None
    c = t_quantile(1 - alpha / 2, df) if crit is None else crit
    need = max(math.log1p(threshold), c * se) + bias
    return float(math.expm1(need + t_quantile(power, df) * se))


@lru_cache(maxsize=4096)
def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (cached: the rounds search asks for the same few again and again)."""
    return float(sps.t.ppf(q, df))


def rounds_for(sd: float, target: float, threshold: float, lo: int, hi: int,
               alpha: float = PLAN_ALPHA, power: float = POWER) -> tuple[int, bool]:
    """The fewest rounds in [lo, hi] at which a paired comparison with per-round SD ``sd`` (of
    the log ratio) calls a ``target`` effect with ``power`` (``smallest_callable``), and whether
    ``hi`` fell short of it (capped). Pure: the second stage's size of a two-stage design."""
    for n in range(max(lo, MIN_ROUNDS), hi + 1):
        mde = smallest_callable(sd / math.sqrt(n), n - 1, alpha, threshold, power)
        if mde is not None and mde <= target:
            return n, False
    return hi, True


def planning_sd(sd: float, pairs: int, assurance: float) -> float:
    """The per-round SD the rounds are planned for: the pilot's SD raised to its upper
    ``assurance`` confidence limit (chi-square, ``pairs`` - 1 degrees of freedom), so that with
    that probability the pilot has not understated the cell's noise (Browne 1995). A 10-round
    pilot's SD alone is low in half the cells, which then get too few rounds (measured:
    docs/statistics.md)."""
    return sd_bound(sd, pairs, 1 - assurance) if assurance > 0.5 else sd


def sd_bound(sd: float, pairs: int, q: float) -> float:
    """A per-round SD over ``pairs`` paired rounds scaled to a one-sided chi-square confidence
    bound (``pairs`` - 1 degrees of freedom): its upper bound at ``q`` below 0.5 (the planning
    SD), its lower bound at ``q`` above it (an optimistic reading of the noise)."""
    k = pairs - 1
    return sd * math.sqrt(k / float(sps.chi2.ppf(q, k))) if k > 0 else sd


def rounds_from_sd(sd: float, pairs: int, rule: Mapping[str, Any], threshold: float,
                   before: int = 0) -> tuple[int, bool, float]:
    """A pilot's SD over ``pairs`` paired rounds to the cell's rounds (never fewer than the
    pilot's, within ``rule["min"]``-``rule["max"]``), whether the cap cut them, and the SD they
    were planned for (``planning_sd``, widened for rounds correlated at ``ASSUMED_RHO``).
    ``before``: measured rounds that will not count (another measured set, ``regime_rounds``):
    the rounds planned are counted after them."""
    planned = (planning_sd(sd, pairs, float(rule["assurance"]))
               * math.sqrt(dependence_factor(ASSUMED_RHO)))
    lo = max(int(rule["min"]), int(rule["pilot"]))
    hi = int(rule["max"])
    n, capped = rounds_for(planned, float(rule["target"]), threshold, MIN_ROUNDS,
                           max(MIN_ROUNDS, hi - before))
    return min(hi, max(lo, before + n)), capped, planned


def plan_rounds(samples: Sequence[Mapping[str, Any]], control: str | None, twin: str | None,
                rule: Mapping[str, Any], threshold: float, fallback: int,
                statistic: str = "mean", next_set: Iterable[str] | None = None
                ) -> RoundsPlan:
    """At the pilot look (pure): a cell's rounds from its own A/A spread. The per-round SD of
    log(control/twin) over the pilot's clean rounds of one measured set (``regime_rounds``:
    the rounds since the last retirement) sets how many rounds the cell needs to call
    ``rule["target"]`` with 80 % power (``rounds_for``, within ``rule["min"]``-``rule["max"]``),
    planned for that SD at its upper ``rule["assurance"]`` confidence limit (``planning_sd``)
    and for rounds correlated at ``ASSUMED_RHO``. Those rounds are counted after the rounds the
    A/A check will not read (before the last retirement; ``next_set``, the rungs that run from
    now on, says whether one happened at this look). Only the A/A pair is read, never a
    comparison the cell reports, so the choice cannot follow an effect (a blinded sample-size
    re-estimation). No usable pair: ``fallback`` rounds. Never fewer rounds than the pilot's."""
    plan: dict[str, Any] = {"pilot": int(rule["pilot"]), "min": int(rule["min"]),
                            "max": int(rule["max"]), "target": float(rule["target"]),
                            "assurance": float(rule["assurance"]),
                            "alpha": PLAN_ALPHA, "power": POWER, "threshold": threshold,
                            "rho": ASSUMED_RHO}
    used = regime_rounds(samples, twin, control) if control and twin else []
    ratios = paired_ratios(samples, twin, control, statistic, used) \
        if used and control and twin else []
    if len(ratios) < MIN_ROUNDS:
        return cast("RoundsPlan", {
                **plan, "sd": None, "rounds": max(fallback, plan["pilot"]), "capped": False,
                "why": f"no A/A pair over the pilot ({len(ratios)} paired rounds): "
                       f"the fixed {fallback} rounds"})
    sets = measured_sets(samples)
    ended = next_set is not None and sets[used[-1]] != frozenset(next_set)
    before = len(sets) if ended else sum(1 for r in sets if r < used[0])
    sd = float(np.log(np.asarray(ratios, dtype=float)).std(ddof=1))
    n, capped, planned = rounds_from_sd(sd, len(ratios), plan, threshold, before)
    after = (f" after the {before} rounds before the last retirement" if before else "")
    return cast("RoundsPlan", {
            **plan, "sd": sd, "planning_sd": planned, "pairs": len(ratios), "rounds": n,
            "capped": capped, "before": before,
            "why": (f"control/twin per-round SD {sd * 100:.1f} % over {len(ratios)} pilot "
                    f"rounds of one measured set ({planned * 100:.1f} % at its upper "
                    f"{plan['assurance'] * 100:g} % limit, allowing for rounds correlated at "
                    f"{ASSUMED_RHO:g}): "
                    + (f"more than {n - before} rounds{after} needed to call "
                       f"±{plan['target'] * 100:g} % with {POWER * 100:.0f} % power; capped at "
                       f"{n}" if capped else
                       f"{n - before} rounds{after} call ±{plan['target'] * 100:g} % with "
                       f"{POWER * 100:.0f} % power"))})


def check_repetitions(reps: int | str, warmup_rounds: int, statistic: str) -> None:
    """repetitions auto calibrates from the warmup round and takes the mean (a best of 5 against
    a best of 1 would be biased): at start-up (config.check_config) and per cell."""
    if reps != "auto":
        return
    if warmup_rounds < 1:
        raise LadderError("measure.repetitions: auto calibrates from the warmup round; "
                          "set measure.warmup_rounds to 1 or more")
    if statistic != "mean":
        raise LadderError(f"measure.round_statistic: {statistic!r} with measure.repetitions "
                          "auto would compare a best (or median) of several repetitions with one "
                          "of one; auto takes the mean")


# the phase of a cell whose samples are several points, each of its own phase (the depth
# experiment: prefill and decode at every depth), each looked at on its own
POINTS = "points"


def check_sequential(block: Mapping[str, Any] | None, phase: str | None
                     ) -> dict[str, Any] | None:
    """measure.sequential (its defaults the schema's) for one cell's phase (None when off):
    the design's level, its maximum rounds (at least ``MIN_ROUNDS``), the dependence it allows
    for inside a cell (``rho``, as the variance factor ``dependence_factor``) and its threshold
    δ resolved to the phase."""
    rule = dict(block or {})
    if not rule.get("enabled") or phase is None:
        return None
    if int(rule["max"]) < MIN_ROUNDS:
        raise LadderError(f"measure.sequential.max {rule['max']}: needs at least {MIN_ROUNDS} "
                          "rounds")
    futility = dict(rule.get("futility") or {})
    if futility.get("enabled"):
        futility = {"enabled": True, "after": max(MIN_ROUNDS, int(futility.get("after", 14))),
                    "margin": max(1.0, float(futility.get("margin", 4)))}
    else:
        futility = {"enabled": False}
    return {"alpha": float(rule["alpha"]), "max": int(rule["max"]), "rho": float(rule["rho"]),
            "factor": dependence_factor(float(rule["rho"])),
            "wait_for": list(rule.get("wait_for") or ["step", "vs_floor"]),
            "futility": futility,
            # a cell of several points names each sample's phase: δ per phase, none for the cell
            "threshold": None if phase == POINTS else threshold_for(rule["threshold"], phase),
            "thresholds": {ph: threshold_for(rule["threshold"], ph) for ph in DEFAULT_THRESHOLD}}


def check_rounds_rule(rounds_from_noise: Mapping[str, Any] | None, phase: str, delta: float
                      ) -> dict[str, Any] | None:
    """measure.rounds_from_noise (its defaults the schema's) for one cell's phase (None when
    off): a pilot of at least 3 rounds, min <= max >= pilot, and a target beyond the threshold
    δ (no effect under δ is ever called, so no number of rounds calls it)."""
    rule = dict(rounds_from_noise or {})
    if not rule.get("enabled"):
        return None
    pilot, lo, hi = int(rule["pilot"]), int(rule["min"]), int(rule["max"])
    where = f"measure.rounds_from_noise (pilot {pilot}, min {lo}, max {hi})"
    if pilot < MIN_ROUNDS or lo > hi or pilot > hi:
        raise LadderError(f"{where}: needs pilot >= {MIN_ROUNDS}, min <= max and "
                          "pilot <= max")
    target = threshold_for(rule["target"], phase)
    if target <= delta:
        raise LadderError(f"{where}: target {target:g} for {phase} is not beyond the threshold "
                          f"{delta:g} (measure.retire.threshold): no rounds can call it")
    return {**rule, "target": target}
