"""The groundwork of anytime-valid comparisons (issue 56, ladder.planning.sequential): the t
confidence sequence is savvi's (its closed form checked against the library), it covers the
true ratio at every look on independent rounds, the group-sequential bounds spend their error
and no more, and the three decisions read the interval against ±δ."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ladder.planning import sequential


def test_the_t_sequence_is_savvis_and_its_closed_form():
    rng = np.random.default_rng(3)
    x = rng.normal(0.08, 0.15, 17)
    mean, lo, hi = sequential.t_sequence(list(x))
    se = float(x.std(ddof=1)) / math.sqrt(len(x))
    assert mean == pytest.approx(x.mean(), abs=1e-6)
    assert (hi - lo) / 2 == pytest.approx(sequential.t_radius(len(x)) * se, rel=1e-3)
    # dependent rounds: the radius grows with the square root of the variance factor
    _, lo2, hi2 = sequential.t_sequence(list(x), factor=2.0)
    assert (hi2 - lo2) / (hi - lo) == pytest.approx(math.sqrt(2.0))
    assert sequential.t_sequence(list(x[:2])) is None
    # its price at fixed n: 1.6-1.9 x the t-interval at 12-40 rounds
    assert all(1.5 < sequential.width_ratio(n) < 2.0 for n in (12, 20, 28, 40))


def test_the_t_sequence_covers_at_every_look():
    """Time-uniform coverage on independent normal rounds: the true mean inside the sequence at
    every n from 3 to 40, in at least 95 % of 2000 series."""
    rng = np.random.default_rng(7)
    x = rng.normal(0.0, 0.1, (2000, 40))
    k = np.arange(1, 41)
    mean = np.cumsum(x, axis=1) / k
    sd = np.sqrt((np.cumsum(x ** 2, axis=1) - k * mean ** 2) / np.maximum(k - 1, 1))
    ever_out = np.zeros(2000, dtype=bool)
    for n in range(3, 41):
        r = sequential.t_radius(n) * sd[:, n - 1] / math.sqrt(n)
        ever_out |= np.abs(mean[:, n - 1]) > r
    assert ever_out.mean() <= 0.05


@pytest.mark.parametrize("rho", [2.0, None])  # the design's power family; O'Brien-Fleming
def test_spending_bounds_spend_alpha_by_the_cap(rho):
    bounds = sequential.spending_bounds(20, 0.05, paths=100_000, rho=rho)
    assert len(bounds) == 18
    assert bounds[0] > bounds[-1] > sps.norm.ppf(0.975)  # strict early, near 1.96 at the end
    assert bounds[-1] < 2.4
    # fresh paths: the chance of ever crossing under no effect is the design's 5 %
    rng = np.random.default_rng(11)
    z = np.abs(np.cumsum(rng.standard_normal((100_000, 20)), axis=1) / np.sqrt(np.arange(1, 21)))
    crossed = (z[:, 2:] >= np.asarray(bounds)).any(axis=1).mean()
    assert 0.04 < crossed < 0.06


def test_the_design_decides_a_gross_step_at_its_first_looks():
    """The power family spends enough early that a 16x step (per-round SD 14 % of the log
    ratio) is decided by the fourth look of 28, where O'Brien-Fleming spending waits for the
    fifth (its third and fourth looks are thousands and hundreds of standard errors wide)."""
    se = lambda n: 0.14 / math.sqrt(n) * math.sqrt(1.105)  # noqa: E731
    gap = math.log(16) - math.log1p(0.05)
    assert sequential.look_critical(4, 28) * se(4) < gap
    obf = sequential.spending_bounds(28, rho=None)
    assert float(sps.t.ppf(sps.norm.cdf(obf[1]), 3)) * se(4) > gap


def test_the_repeated_interval_narrows_to_near_the_fixed_width():
    x = list(np.random.default_rng(5).normal(0.1, 0.1, 28))
    m, lo, hi = sequential.repeated_interval(x, 28)
    se = float(np.std(x, ddof=1)) / math.sqrt(28)
    fixed = sps.t.ppf(0.975, 27) * se
    assert 1.0 < (hi - lo) / 2 / fixed < 1.2  # 2.37 against 2.05 (power family, rho 2)
    assert sequential.repeated_interval(x[:2], 28) is None
    early = sequential.repeated_interval(x[:4], 28)
    assert early[2] - early[1] > 3 * (hi - lo)


@pytest.mark.parametrize("lo, hi, want", [
    (0.06, 0.2, "faster"), (-0.3, -0.06, "slower"), (-0.02, 0.03, "equivalent"),
    (0.01, 0.2, None), (-0.2, 0.2, None)])
def test_three_decisions_on_the_interval(lo, hi, want):
    assert sequential.decide(lo, hi, 0.05) == want


def test_the_repeated_p_agrees_with_the_interval_at_the_designs_level():
    """The run's multiplicity step reads the repeated p-value: at the design's level it says
    significant exactly when the repeated interval excludes 0 (up to the level grid's
    interpolation, 10 % of the level), and it falls as the evidence grows. (Before round 8 the
    design spends almost nothing at 5 %: its bound there is beyond the level grid.)"""
    for n in (8, 12, 20, 28):
        crit = sequential.look_critical(n, 28, 0.05)
        assert sequential.repeated_p(crit * 1.03, n, 28) < 0.05 < sequential.repeated_p(
            crit * 0.97, n, 28)
        assert sequential.repeated_p(crit, n, 28) == pytest.approx(0.05, rel=0.1)
    ps = [sequential.repeated_p(t, 20, 28) for t in (0.5, 1.5, 2.5, 4.0, 8.0)]
    assert ps == sorted(ps, reverse=True) and ps[-1] < 1e-3
    # early looks are strict: the same t is worth less at round 4 than at 28
    assert sequential.repeated_p(3.0, 4, 28) > sequential.repeated_p(3.0, 28, 28)


def test_a_look_decides_each_comparison_once_and_names_the_rungs_still_needed():
    """``look`` (pure) over samples of a floor, a step and an A/A pair: the floor's 20x step is
    decided faster, the rest stays open; a decided comparison is not looked at again; the
    control and its twin stay needed while anything is open."""
    rng = np.random.default_rng(5)
    speed = {"floor": 1.0, "native": 20.0, "vendor": 21.0, "control": 20.0}
    samples = [{"rung": n, "round": r, "tokens_per_s": v * math.exp(0.08 * rng.standard_normal())}
               for r in range(6) for n, v in speed.items()]
    ladder = ["floor", "native", "vendor"]
    new = sequential.look(samples, ladder, "control", "native", {}, 28, 0.05, 1.1, 0.05)
    assert new["step:floor:native"]["decision"] == "faster"
    assert new["step:floor:native"]["rounds"] == 6
    assert "step:native:vendor" not in new and "aa:native:control" not in new
    again = sequential.look(samples, ladder, "control", "native", new, 28, 0.05, 1.1, 0.05)
    assert not set(again) & set(new)
    comps = sequential.cell_comparisons(ladder, "control", "native", set(speed))
    need = sequential.still_needed(comps, new, "control", "native")
    assert need == {"native", "vendor", "control"}  # the floor's comparisons are all decided
    everything = {sequential.comparison_key(*c): {} for c in comps}
    assert sequential.still_needed(comps, everything, "control", "native") == set()
    # the A/A pair is a check on the calls: with every call decided, nothing is needed; alone
    # in a cell it is the comparison
    calls = {k: v for k, v in everything.items() if not k.startswith("aa:")}
    assert sequential.still_needed(comps, calls, "control", "native") == set()
    aa = [c for c in comps if c[0] == "aa"]
    assert sequential.still_needed(aa, {}, "control", "native") == {"control", "native"}


def test_a_probe_waits_for_its_steps_only():
    """A bisection's probe (good, probe, bad) is placed by its two steps: with both decided the
    cell is done, though the ends' step over the floor (good -> bad) is still open."""
    comps = sequential.cell_comparisons(["good", "probe", "bad"], "control", "good",
                                        {"good", "probe", "bad", "control"})
    steps = {sequential.comparison_key(*c): {} for c in comps if c[0] == "step"}
    assert sequential.still_needed(comps, steps, "control", "good") == {
        "good", "bad", "probe", "control"}  # the default waits for good -> bad too
    assert sequential.still_needed(comps, steps, "control", "good", ("step",)) == set()


def test_a_comparison_out_of_the_designs_reach_is_closed_for_futility():
    """Non-binding futility (``out_of_reach``): an effect sitting on δ (5 % at δ 5 %) in noise
    of 6 % needs far more than twice the maximum, so after ``after`` rounds it is closed
    ("futile", with the rounds it would need: None, none would); not before ``after``; never a
    comparison within reach (a 12 % step decides within the design), never the A/A check,
    never with futility off."""
    rng = np.random.default_rng(3)
    on = {"enabled": True, "after": 8, "margin": 2.0}
    swing = [0.06 * (-1) ** i for i in range(10)]
    at_delta = [math.log(1.05) + d for d in swing]  # its mean exactly on δ
    assert sequential.out_of_reach(at_delta[:7], 28, 0.05, 1.1, 0.05, on) is False
    assert sequential.out_of_reach(at_delta[:8], 28, 0.05, 1.1, 0.05, on) is None
    assert sequential.out_of_reach(at_delta, 28, 0.05, 1.1, 0.05, {"enabled": False}) is False
    near = [math.log(1.06) + d for d in swing]  # 1 % from δ: ~190 rounds, beyond 5 x 28
    assert sequential.out_of_reach(near, 28, 0.05, 1.1, 0.05, {**on, "margin": 5.0}) == \
        sequential.rounds_to_decide(float(np.mean(near)), float(np.std(near, ddof=1)), 1.1, 28,
                                    0.05, 0.05) > 140
    assert sequential.out_of_reach(near, 28, 0.05, 1.1, 0.05, {**on, "margin": 10.0}) is False
    within = [math.log(1.12) + d for d in swing]
    assert sequential.out_of_reach(within, 28, 0.05, 1.1, 0.05, on) is False
    # through a look: the vendor step on δ is closed; the A/A pair (equal) is not
    speed = {"native": 20.0, "vendor": 21.0, "control": 20.0}
    samples = [{"rung": n, "round": r, "tokens_per_s": v * math.exp(0.06 * rng.standard_normal())}
               for r in range(10) for n, v in speed.items()]
    new = sequential.look(samples, ["native", "vendor"], "control", "native", {}, 28, 0.05, 1.1,
                          0.05, futility={"enabled": True, "after": 8, "margin": 20.0})
    assert not any(k.startswith("aa:") and d["decision"] == "futile" for k, d in new.items())
    futile = {k: d for k, d in new.items() if d["decision"] == "futile"}
    for d in futile.values():
        assert d["rounds"] == 10 and (d["need"] is None or d["need"] > 560)
    comps = sequential.cell_comparisons(["native", "vendor"], "control", "native", set(speed))
    if "step:native:vendor" in futile:  # closed: no rung is needed for it any more
        assert sequential.still_needed(comps, new, "control", "native") == set()


def test_rounds_to_decide_is_the_designs_up_to_its_maximum():
    band = 0.05
    near = sequential.rounds_to_decide(math.log(1.07), 0.1, 1.0, 28, 0.05, band)
    assert near is not None and near > 28  # beyond the maximum: the fixed-n t (at least)
    assert sequential.rounds_to_decide(math.log1p(band), 0.1, 1.0, 28, 0.05, band) is None
