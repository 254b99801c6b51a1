"""The measurement protocol: what a round is worth, which comparisons a cell makes, and when an
early look may retire a rung (Haybittle-Peto). Shared by the measurement (``ladder.bench``) and
the analysis (``ladder.stats``), so the analysis can change without re-measuring (issue 32):
a measuring rule's identity reaches this module, never ``ladder.stats``.

``VERSION`` is the protocol's explicit version (asv's benchmark_version): bump it when the way of
measuring changes, and every cell is measured again; a change of the statistics, the report or
a comment re-runs only the analysis, from the kept raw samples.
"""

from __future__ import annotations

import math
import secrets
from collections import defaultdict
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from ladder.core.errors import LadderError

VERSION = 2  # 2: rounds chosen per cell from its pilot's A/A spread (measure.rounds_from_noise)
# The practical threshold below which a change is not called, per phase (measured A/A bias and
# the effects users ask about; README "Resolving power").
DEFAULT_THRESHOLD = {"prefill": 0.05, "decode": 0.03}
# Early looks only retire a rung whose every comparison is called at this strict level
# (Haybittle-Peto): the final analysis keeps its nominal level.
INTERIM_ALPHA = 0.001
MIN_ROUNDS = 3  # the fewest paired rounds a comparison is judged on
POWER = 0.80  # the power at which "the smallest effect this cell calls" is stated
PLAN_ALPHA = 0.05  # the two-sided level the rounds are planned for (stats.confidence 0.95)

# What one round of one rung is worth, from its process's llama-bench repetitions (-r): every
# repetition is kept as a sample; the statistic is chosen by measurement
# (measurements/round_statistic.py) and recorded in each cell ("round_statistic").
ROUND_STATISTICS = {"mean": np.mean, "median": np.median, "best": np.max}


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


def comparisons(ladder: Sequence[str], measured: set[str]) -> list[tuple[str, str, str]]:
    """(kind, base, rung) a cell judges: each measured rung over the one before it ("step"),
    and each over the floor when the floor was measured ("vs_floor")."""
    present = [n for n in ladder if n in measured]
    out = [("step", a, b) for a, b in zip(present, present[1:])]
    if ladder and ladder[0] in measured:
        out += [("vs_floor", ladder[0], b) for b in present[1:]]
    return out


def gross_step(ratios: Sequence[float], threshold: float, alpha: float) -> bool:
    """Called at level ``alpha`` already: the paired t-test on the log ratios rejects "no
    difference" at ``alpha`` and the geometric mean is beyond the threshold (the final
    analysis's rule, ``stats.verdict``, at the strict interim level)."""
    if len(ratios) < MIN_ROUNDS:
        return False
    logs = np.log(np.asarray(ratios, dtype=float))
    m, sd = float(logs.mean()), float(logs.std(ddof=1))
    se = sd / math.sqrt(len(logs))
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
        if not gross_step(paired_ratios(samples, base, other, statistic), threshold, alpha):
            open_rungs |= {base, other}
    return seen - open_rungs


def smallest_callable(se: float | None, df: float | None, alpha: float, threshold: float,
                      power: float = POWER, bias: float = 0.0) -> float | None:
    """The smallest true effect (a fraction) that a comparison with this standard error (log
    scale) calls faster with probability ``power``: the estimate must clear both the test's
    critical value and the threshold, so exp(max(ln(1 + δ), t·se) + bias + t_power·se) - 1."""
    if se is None or df is None or df < 1:
        return None
    need = max(math.log1p(threshold), t_quantile(1 - alpha / 2, df) * se) + bias
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
    README "Resolving power")."""
    k = pairs - 1
    return sd * math.sqrt(k / float(sps.chi2.ppf(1 - assurance, k))) if assurance > 0.5 else sd


def rounds_from_sd(sd: float, pairs: int, rule: Mapping[str, Any], threshold: float
                   ) -> tuple[int, bool, float]:
    """A pilot's SD over ``pairs`` paired rounds to the cell's rounds (never fewer than the
    pilot's, within ``rule["min"]``-``rule["max"]``), whether the cap cut them, and the SD they
    were planned for (``planning_sd``)."""
    planned = planning_sd(sd, pairs, float(rule.get("assurance", 0.8)))
    n, capped = rounds_for(planned, float(rule["target"]), threshold,
                           max(int(rule["min"]), int(rule["pilot"])), int(rule["max"]))
    return n, capped, planned


def plan_rounds(samples: Sequence[Mapping[str, Any]], control: str | None, twin: str | None,
                rule: Mapping[str, Any], threshold: float, fallback: int,
                statistic: str = "mean") -> dict[str, Any]:
    """At the pilot look (pure): a cell's rounds from its own A/A spread. The per-round SD of
    log(control/twin) over the pilot's clean rounds sets how many rounds the cell needs to call
    ``rule["target"]`` with 80 % power (``rounds_for``, within ``rule["min"]``-``rule["max"]``),
    planned for that SD at its upper ``rule["assurance"]`` confidence limit (``planning_sd``).
    Only the A/A pair is read, never a comparison the cell reports, so the choice cannot follow
    an effect (a blinded sample-size re-estimation). No usable pair: ``fallback`` rounds. Never
    fewer rounds than the pilot's."""
    plan: dict[str, Any] = {"pilot": int(rule["pilot"]), "min": int(rule["min"]),
                            "max": int(rule["max"]), "target": float(rule["target"]),
                            "assurance": float(rule.get("assurance", 0.8)),
                            "alpha": PLAN_ALPHA, "power": POWER, "threshold": threshold}
    ratios = (paired_ratios(samples, twin, control, statistic) if control and twin else [])
    if len(ratios) < MIN_ROUNDS:
        return {**plan, "sd": None, "rounds": max(fallback, plan["pilot"]), "capped": False,
                "why": f"no A/A pair over the pilot ({len(ratios)} paired rounds): "
                       f"the fixed {fallback} rounds"}
    sd = float(np.log(np.asarray(ratios, dtype=float)).std(ddof=1))
    n, capped, planned = rounds_from_sd(sd, len(ratios), plan, threshold)
    return {**plan, "sd": sd, "planning_sd": planned, "pairs": len(ratios), "rounds": n,
            "capped": capped,
            "why": (f"control/twin per-round SD {sd * 100:.1f} % over {len(ratios)} pilot "
                    f"rounds ({planned * 100:.1f} % at its upper "
                    f"{plan['assurance'] * 100:g} % limit): "
                    + (f"more than {n} rounds needed to call ±{plan['target'] * 100:g} % with "
                       f"{POWER * 100:.0f} % power; capped at {n}" if capped else
                       f"{n} rounds call ±{plan['target'] * 100:g} % with "
                       f"{POWER * 100:.0f} % power"))}
