"""Anytime-valid inference on a paired comparison (issue 56): two candidate
sequences for the mean per-round log ratio of a comparison, valid however often a cell looks
and whenever it stops, and the three decisions they allow against the practical threshold δ.

- ``t_sequence``: the anytime-valid t confidence sequence of Lindon, Ham, Tingley and Bojinov
  (2024), Gaussian rounds with an unknown variance, as the maintained ``savvi`` package
  computes it (``savvi.LinearRegression`` on an intercept: the paired mean). Valid at every
  round with no maximum; its price is width: 1.6-1.9 times the fixed-n t-interval at 12-40
  rounds (``width_ratio``).
- ``repeated_interval``: repeated confidence intervals of a group-sequential design with a look
  after every round up to a maximum, error spent by the Kim-DeMets power family α·t² (the
  design's choice, ``SPENDING_RHO``; O'Brien-Fleming-type Lan-DeMets spending with
  ``rho=None``) (``spending_bounds``): near the fixed-n width at the maximum, wide at the first
  looks (where only gross steps are decided). No Python library computes these bounds with this
  project's dependencies (spotify-confidence's solver needs pandas < 3), so they are computed
  here, by simulation of the standardised partial sums, with a fixed seed.

Both take the run's dependence as a variance factor on the standard error (``factor``: 1 for
independent rounds). The harness uses ``repeated_interval`` (chosen by measurement:
``measurements/sequential_rules.py``, docs/anytime-valid.md): ``look`` after every round of a
cell, ``still_needed`` for the rungs the next round runs; the analysis reads the same bounds
(``look_critical``, ``repeated_p``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from ladder.planning import protocol

Decision = Literal["faster", "slower", "equivalent"]
MIN_ROUNDS = 3  # the t sequence needs two degrees of freedom past the mean


def t_sequence(logs: Sequence[float], alpha: float = 0.05, factor: float = 1.0,
               phi: float = 1.0) -> tuple[float, float, float] | None:
    """(mean, lo, hi) of the anytime-valid t confidence sequence at level 1 - ``alpha`` after
    these rounds (savvi's ``LinearRegression``, one intercept), its radius widened by
    sqrt(``factor``) for dependent rounds; None before ``MIN_ROUNDS``. ``phi``: the mixture's
    prior scale (where in n the sequence is tightest)."""
    from savvi.linear_regression import LinearRegression

    if len(logs) < MIN_ROUNDS:
        return None
    model = LinearRegression(alpha, 1, phi=phi)
    for x in logs:
        model.update(np.array([float(x), 1.0]))
    lo, hi = (float(v) for v in model.calculate_conf_int()[0])
    mean = float(model.beta[0])
    half = (hi - lo) / 2 * math.sqrt(max(1.0, factor))
    return mean, mean - half, mean + half


def t_radius(n: int, alpha: float = 0.05, phi: float = 1.0) -> float:
    """The t sequence's radius in standard errors (sd/√n) after ``n`` rounds (its closed form:
    savvi's ``calculate_conf_int`` for an intercept, z² = n, ν = n - 2); inf where it is not
    yet finite."""
    nu = n - 2
    if nu <= 0:
        return math.inf
    r = phi / (phi + n)
    a = (r * alpha ** 2) ** (1 / (nu + 1))
    return math.sqrt(nu * (1 - a) / (a - r)) if a > r else math.inf


def width_ratio(n: int, alpha: float = 0.05, phi: float = 1.0) -> float:
    """How much wider than the fixed-n t-interval the t sequence is after ``n`` rounds."""
    return t_radius(n, alpha, phi) / float(sps.t.ppf(1 - alpha / 2, n - 1))


# The design's spending function: Kim & DeMets' power family α·t^ρ at ρ = 2. O'Brien-Fleming-type
# spending (the study's first candidate) spends almost nothing before a third of the rounds: at
# a maximum of 28 its repeated interval at the third and fourth looks is 48,876 and 481 standard
# errors wide, so even the floor's 16x step waits for the fifth round and a cell stopped by its
# budget before then calls nothing. ρ = 2 gives 42 and 15 (a gross step decided at the third or
# fourth look, as the earlier Haybittle-Peto looks did) for 2.37 instead of 2.31 at the last look
# (3 % wider) and 3.56 instead of 4.01 at the twelfth (docs/anytime-valid.md).
SPENDING_RHO: float | None = 2.0


def power_spent(t: float, alpha: float, rho: float) -> float:
    """Kim-DeMets power-family spending: the error spent by information fraction t."""
    return alpha * min(max(t, 0.0), 1.0) ** rho


def obf_spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending: the error spent by information fraction t."""
    if t <= 0:
        return 0.0
    return float(2 * (1 - sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / math.sqrt(min(t, 1.0)))))


@lru_cache(maxsize=4)
def _partial_sums(n_max: int, paths: int, seed: int) -> np.ndarray:
    """|Z_k| of ``paths`` simulated standardised partial sums of ``n_max`` rounds (a constant
    of the design: a fixed seed), shared by every level's bounds."""
    rng = np.random.default_rng(seed)
    sums = np.cumsum(rng.standard_normal((paths, n_max)), axis=1)
    return np.abs(sums / np.sqrt(np.arange(1, n_max + 1)))


@lru_cache(maxsize=256)
def spending_bounds(n_max: int, alpha: float = 0.05, first: int = MIN_ROUNDS,
                    paths: int = 200_000, seed: int = 56,
                    rho: float | None = SPENDING_RHO) -> tuple[float, ...]:
    """Two-sided z bounds c_k for a look after every round k = ``first``..``n_max``, each
    spending its share of ``alpha`` (``power_spent`` at k/n_max, power ``rho``; None:
    ``obf_spent``): under no effect, the chance
    that |Z_j| < c_j at every earlier look and |Z_k| ≥ c_k is that share. Found look by look on
    ``paths`` simulated standardised partial sums (a fixed seed: the bounds are a constant of
    the design)."""
    z = _partial_sums(n_max, paths, seed)
    alive = np.ones(paths, dtype=bool)
    bounds = []
    spent = 0.0
    for k in range(first, n_max + 1):
        frac = k / n_max
        share = (obf_spent(frac, alpha) if rho is None else power_spent(frac, alpha, rho)) - spent
        zk = z[alive, k - 1]
        need = int(round(share * paths))
        if need <= 0 or need >= len(zk):
            c = float(zk.max()) + 1.0 if need <= 0 else 0.0
        else:
            c = float(np.partition(zk, len(zk) - need)[len(zk) - need])
        crossed = alive.copy()
        crossed[alive] = zk >= c
        spent += crossed.sum() / paths
        alive &= ~crossed
        bounds.append(c)
    return tuple(bounds)


def look_critical(n: int, n_max: int, alpha: float = 0.05) -> float:
    """The repeated interval's critical value, in standard errors, at the look after ``n``
    paired rounds of a design looking after every round up to ``n_max``: the look's z bound
    (``spending_bounds``) carried to Student's t with n - 1 degrees of freedom at the same
    tail probability. A comparison with more rounds than the design's maximum takes the last
    look's (the design has spent its error by then)."""
    if n < MIN_ROUNDS:
        return math.inf
    c = spending_bounds(n_max, alpha)[min(n, n_max) - MIN_ROUNDS]
    return float(sps.t.ppf(sps.norm.cdf(c), n - 1))


# the levels the repeated p-value is read between (log-spaced; a p below the first is given as
# the first)
P_GRID = tuple(float(a) for a in np.geomspace(1e-5, 0.999, 31))


@lru_cache(maxsize=64)
def _bounds_by_level(n_max: int) -> np.ndarray:
    """The z bound of every look (columns) at every level of ``P_GRID`` (rows), on 100,000
    paths (a p-value needs less precision than the design's own bound)."""
    return np.array([spending_bounds(n_max, a, paths=100_000) for a in P_GRID])


def repeated_p(t_abs: float, n: int, n_max: int) -> float:
    """The repeated p-value of a comparison at the look after ``n`` rounds (|t| = |mean|/se):
    the smallest level at which the design's repeated interval at this look excludes 0, read
    off ``P_GRID`` (interpolated in log level). At the design's own level it agrees exactly
    with the interval; it is what the run's multiplicity step reads."""
    if n < MIN_ROUNDS or not math.isfinite(t_abs):
        return 0.0 if t_abs == math.inf else 1.0
    z = float(sps.norm.ppf(sps.t.cdf(t_abs, n - 1)))
    col = _bounds_by_level(n_max)[:, min(n, n_max) - MIN_ROUNDS]  # falls as the level rises
    if z >= col[0]:
        return P_GRID[0]
    if z < col[-1]:
        return 1.0
    i = int(np.argmax(col <= z))  # the first (smallest) level whose bound z reaches
    lo_a, hi_a, lo_c, hi_c = P_GRID[i - 1], P_GRID[i], col[i - 1], col[i]
    w = (lo_c - z) / (lo_c - hi_c) if lo_c > hi_c else 1.0
    return float(math.exp(math.log(lo_a) + w * (math.log(hi_a) - math.log(lo_a))))


def repeated_interval(logs: Sequence[float], n_max: int, alpha: float = 0.05,
                      factor: float = 1.0) -> tuple[float, float, float] | None:
    """(mean, lo, hi): the repeated confidence interval after len(``logs``) rounds of a design
    that looks after every round up to ``n_max`` (``spending_bounds``), the z bound carried to
    Student's t with n - 1 degrees of freedom at the same tail probability, the standard error
    widened by sqrt(``factor``)."""
    n = len(logs)
    if n < MIN_ROUNDS or n > n_max:
        return None
    x = np.asarray(logs, dtype=float)
    se = float(x.std(ddof=1)) / math.sqrt(n) * math.sqrt(max(1.0, factor))
    crit = look_critical(n, n_max, alpha)
    m = float(x.mean())
    return m, m - crit * se, m + crit * se


def decide(lo: float, hi: float, threshold: float) -> Decision | None:
    """The three decisions on an interval of the log ratio against ±ln(1 + δ): wholly beyond
    (faster or slower by at least δ), wholly inside (equivalent), else still open."""
    band = math.log1p(threshold)
    if lo >= band:
        return "faster"
    if hi <= -band:
        return "slower"
    if -band <= lo and hi <= band:
        return "equivalent"
    return None


def rounds_to_decide(m: float, sd: float, factor: float, n_max: int, alpha: float,
                     threshold: float, limit: int = 400) -> int | None:
    """The fewest rounds at which a comparison with this per-round SD and mean log ratio would
    be decided (its repeated interval wholly beyond ±δ or wholly inside it), if the effect
    stays as measured; None: not within ``limit`` (the effect sits on ±δ). Up to the design's
    maximum, its own looks; beyond it, the fixed-n t-interval (what a longer design would need
    at least)."""
    gap = abs(abs(m) - math.log1p(threshold))
    if sd <= 0:
        return MIN_ROUNDS
    for n in range(MIN_ROUNDS, limit + 1):
        crit = look_critical(n, n_max, alpha) if n <= n_max else float(
            sps.t.ppf(1 - alpha / 2, n - 1))
        if crit * sd * math.sqrt(max(1.0, factor)) / math.sqrt(n) <= gap:
            return n
    return None


def out_of_reach(logs: Sequence[float], n_max: int, alpha: float, factor: float,
                 threshold: float, futility: Mapping[str, Any] | None) -> int | None | bool:
    """Non-binding futility: whether an open comparison is out of the design's reach, so that
    another round gains it nothing: after ``futility["after"]`` rounds, the rounds that would
    decide it at the noise and effect measured so far (``rounds_to_decide``) exceed
    ``futility["margin"]`` times the design's maximum, or no number of rounds would (its
    effect sits on ±δ). Returns those rounds (None: none would) when it is, False when it is
    not. Stopping such a comparison spends no error (its interval stays the design's repeated
    interval, valid at any stopping time); it costs power only where the early estimate
    understated a gap to ±δ (measured: docs/anytime-valid.md)."""
    if not futility or not futility.get("enabled") or len(logs) < int(futility["after"]):
        return False
    x = np.asarray(logs, dtype=float)
    need = rounds_to_decide(float(x.mean()), float(x.std(ddof=1)), factor, n_max, alpha,
                            threshold)
    return need if need is None or need > float(futility["margin"]) * n_max else False


# --- the harness's looks (issue 56): every comparison of a cell, after every round -----------

def comparison_key(kind: str, base: str, other: str) -> str:
    """A comparison's name in a cell's record: kind:base:other (kind step, vs_floor or aa)."""
    return f"{kind}:{base}:{other}"


def point_key(point: str | None, key: str) -> str:
    """A comparison's name in a cell of several points: ``point|kind:base:other``."""
    return key if point is None else f"{point}|{key}"


def decided_at(decided: Mapping[str, Any], point: str | None) -> dict[str, Any]:
    """A point's decided comparisons by their own key (``point_key`` undone); None: the cell's
    own (those without a point)."""
    if point is None:
        return {k: v for k, v in decided.items() if "|" not in k}
    head = f"{point}|"
    return {k[len(head):]: v for k, v in decided.items() if k.startswith(head)}


def by_point(samples: Sequence[Mapping[str, Any]]
             ) -> list[tuple[str | None, list[Mapping[str, Any]]]]:
    """A cell's samples by the point they name, in first-seen order ([(None, all)] when none
    names one: a cell of one workload)."""
    points = list(dict.fromkeys(str(s["point"]) for s in samples if s.get("point")))
    if not points:
        return [(None, list(samples))]
    return [(p, [s for s in samples if s.get("point") == p]) for p in points]


def describe(key: str) -> str:
    """A decided comparison's key for a progress line: "[point] base -> other"."""
    point, _, comp = key.rpartition("|")
    text = comp.split(":", 1)[1].replace(":", " -> ")
    return f"{point} {text}" if point else text


def cell_comparisons(ladder: Sequence[str], control: str | None, twin: str | None,
                     measured: set[str], grid: Mapping[str, tuple[str, int]] | None = None
                     ) -> list[tuple[str, str, str]]:
    """(kind, base, other) of every comparison a cell decides: the ladder's steps and its
    comparisons with the floor (``protocol.comparisons``), or, in a cell whose entries are
    (rung, threads) pairs (``grid``: entry name -> (rung, threads), a reconciliation cell),
    the same-count steps and each rung's thread counts (``protocol.grid_comparisons``); and
    the A/A pair (control over its twin) when both were measured."""
    out = (protocol.grid_comparisons(ladder, grid, measured) if grid
           else protocol.comparisons(ladder, measured))
    if control and twin and {control, twin} <= measured:
        out.append(("aa", twin, control))
    return out


def look(samples: Sequence[Mapping[str, Any]], ladder: Sequence[str], control: str | None,
         twin: str | None, decided: Mapping[str, Mapping[str, Any]], n_max: int,
         alpha: float, factor: float, threshold: float, statistic: str = "mean",
         futility: Mapping[str, Any] | None = None,
         grid: Mapping[str, tuple[str, int]] | None = None) -> dict[str, dict[str, Any]]:
    """A look after a round (pure): each still-open comparison's repeated interval over every
    round both its rungs were measured in (clean samples), and those it decides
    (``decide``: beyond ±δ, or inside it). Returns the comparisons decided at this look, by
    ``comparison_key``, each with its decision, rounds and interval (log ratio). A decision
    is final: a decided comparison is not looked at again. With ``futility``, a comparison no
    round within reach would decide (``out_of_reach``) is closed too, with the decision
    "futile" (not a call: it is reported as it stands) and the rounds it would need.
    ``grid``: a reconciliation cell's entries (``cell_comparisons``)."""
    clean = protocol.clean_samples(samples)
    measured = {str(s["rung"]) for s in clean}
    new: dict[str, dict[str, Any]] = {}
    for kind, base, other in cell_comparisons(ladder, control, twin, measured, grid):
        key = comparison_key(kind, base, other)
        if key in decided:
            continue
        ratios = protocol.paired_ratios(clean, base, other, statistic)
        got = repeated_interval(np.log(ratios).tolist(), n_max, alpha, factor) \
            if len(ratios) >= MIN_ROUNDS else None
        if got is None:
            continue
        m, lo, hi = got
        d = decide(lo, hi, threshold)
        if d is not None:
            new[key] = {"decision": d, "rounds": len(ratios), "estimate": m, "lo": lo, "hi": hi}
            continue
        if kind == "aa":  # a check on the calls, stopped with them, never for futility
            continue
        need = out_of_reach(np.log(ratios).tolist(), n_max, alpha, factor, threshold, futility)
        if need is not False:
            new[key] = {"decision": "futile", "rounds": len(ratios), "estimate": m, "lo": lo,
                        "hi": hi, "need": need}
    return new


def still_needed(comps: Sequence[tuple[str, str, str]], decided: Mapping[str, Any],
                 control: str | None, twin: str | None,
                 wait_for: Sequence[str] = ("step", "vs_floor")) -> set[str]:
    """The rungs the next round measures: those of an open comparison, and, while any is
    open, the control and its twin (the A/A check covers every round a call rests on). The A/A
    pair is a check on the calls, not a call of its own: once every other comparison is decided
    nothing is needed (it keeps the cell running only where it is the cell's one comparison).
    ``wait_for``: the kinds of comparison the cell waits for (a bisection's probe: its steps,
    which place it; the ends' own step is known). Empty: the cell is done."""
    calls = [c for c in comps if c[0] != "aa" and c[0] in wait_for] or [
        c for c in comps if c[0] == "aa"]
    need: set[str] = set()
    for kind, base, other in calls:
        if comparison_key(kind, base, other) not in decided:
            need |= {base, other}
    if need:
        need |= {n for n in (control, twin) if n}
    return need
