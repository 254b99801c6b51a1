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
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from ladder.errors import LadderError

VERSION = 1
# The practical threshold below which a change is not called, per phase (measured A/A bias and
# the effects users ask about; README "Resolving power").
DEFAULT_THRESHOLD = {"prefill": 0.05, "decode": 0.03}
# Early looks only retire a rung whose every comparison is called at this strict level
# (Haybittle-Peto): the final analysis keeps its nominal level.
INTERIM_ALPHA = 0.001
MIN_ROUNDS = 3  # the fewest paired rounds a comparison is judged on

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
