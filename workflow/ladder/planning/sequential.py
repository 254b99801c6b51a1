"""Anytime-valid inference on a paired comparison (issue 56, the groundwork): two candidate
sequences for the mean per-round log ratio of a comparison, valid however often a cell looks
and whenever it stops, and the three decisions they allow against the practical threshold δ.

- ``t_sequence``: the anytime-valid t confidence sequence of Lindon, Ham, Tingley and Bojinov
  (2024), Gaussian rounds with an unknown variance, as the maintained ``savvi`` package
  computes it (``savvi.LinearRegression`` on an intercept: the paired mean). Valid at every
  round with no maximum; its price is width: 1.6-1.9 times the fixed-n t-interval at 12-40
  rounds (``width_ratio``).
- ``repeated_interval``: repeated confidence intervals of a group-sequential design with a look
  after every round up to a maximum, O'Brien-Fleming-type Lan-DeMets spending
  (``spending_bounds``): nearly the fixed-n width at the maximum, very wide at the first looks
  (where only gross steps are decided). No Python library computes these bounds with this
  project's dependencies (spotify-confidence's solver needs pandas < 3), so they are computed
  here, by simulation of the standardised partial sums, with a fixed seed.

Both take the run's dependence as a variance factor on the standard error (``factor``: 1 for
independent rounds). Which one the harness uses is chosen by measurement
(``measurements/sequential_rules.py``, docs/anytime-valid.md); neither is wired into the
measurement yet.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal, Sequence

import numpy as np
from scipy import stats as sps

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


def obf_spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type spending: the error spent by information fraction t."""
    if t <= 0:
        return 0.0
    return float(2 * (1 - sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / math.sqrt(min(t, 1.0)))))


@lru_cache(maxsize=64)
def spending_bounds(n_max: int, alpha: float = 0.05, first: int = MIN_ROUNDS,
                    paths: int = 200_000, seed: int = 56) -> tuple[float, ...]:
    """Two-sided z bounds c_k for a look after every round k = ``first``..``n_max``, each
    spending its share of ``alpha`` (``obf_spent`` at k/n_max): under no effect, the chance
    that |Z_j| < c_j at every earlier look and |Z_k| ≥ c_k is that share. Found look by look on
    ``paths`` simulated standardised partial sums (a fixed seed: the bounds are a constant of
    the design)."""
    rng = np.random.default_rng(seed)
    sums = np.cumsum(rng.standard_normal((paths, n_max)), axis=1)
    z = np.abs(sums / np.sqrt(np.arange(1, n_max + 1)))
    alive = np.ones(paths, dtype=bool)
    bounds = []
    spent = 0.0
    for k in range(first, n_max + 1):
        share = obf_spent(k / n_max, alpha) - spent
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
    c = spending_bounds(n_max, alpha)[n - MIN_ROUNDS]
    crit = float(sps.t.ppf(sps.norm.cdf(c), n - 1))
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
