"""Statistics: paired ratios, bootstrap CIs, noise floor and verdicts."""

from __future__ import annotations

import math
import re

import pytest

from ladder import stats
from ladder.errors import LadderError


def sample(rung: str, rnd: int, tps: float, **kw) -> dict:
    base = {"rung": rung, "round": rnd, "tokens_per_s": tps, "build_key": f"k-{rung}",
            "hostname": "h", "arch": "x86_64", "thp": "madvise", "n_threads": 2, "n_prompt": 0,
            "n_gen": 64, "n_depth": 0, "build_commit": "0c1e570", "model_size": 1,
            "peak_rss_kib": 1000}
    base.update(kw)
    return base


def test_paired_ratios_use_only_common_rounds():
    s = [sample("a", 0, 10), sample("a", 1, 10), sample("b", 1, 30), sample("b", 2, 5)]
    assert stats.paired_ratios(s, "a", "b") == [3.0]


def test_ratio_ci_is_geometric_and_brackets_the_estimate():
    r = stats.ratio_ci([2.0, 2.2, 1.8, 2.1, 1.9], resamples=2000, seed=3)
    assert r.estimate == pytest.approx(math.exp(sum(map(math.log, [2, 2.2, 1.8, 2.1, 1.9])) / 5))
    assert r.lo <= r.estimate <= r.hi
    assert r.lo > 1.0


def test_noise_floor_is_the_control_ratio_ci_reach():
    ct = stats.ratio_ci([1.01, 0.98, 1.005, 0.99], resamples=2000, seed=1)
    floor = stats.noise_floor(ct)
    assert floor == pytest.approx(max(1 - ct.lo, ct.hi - 1))
    assert 0 < floor <= stats.max_round_deviation([1.01, 0.98, 1.005, 0.99]) == pytest.approx(0.02)
    assert stats.noise_floor(stats.ratio_ci([1.0])) is None


def test_verdict_needs_significance_and_the_floor():
    big = stats.ratio_ci([3.0, 3.1, 2.9, 3.05], resamples=2000)
    v = stats.verdict(big, 0.02)
    assert v.call == "faster" and v.significant and v.beyond_floor
    assert re.match(r"3\.0\dx faster \(95% CI 2\.9\dx-3\.\d\dx; noise floor 2\.0 %\)", v.text), v.text
    small = stats.ratio_ci([1.011, 1.012, 1.010, 1.013], resamples=2000)
    v = stats.verdict(small, 0.02)  # significant, but inside a 2 % floor
    assert v.call == "within noise" and "x" not in v.text.split("(")[0]
    assert "inside the noise floor" in v.text
    noisy = stats.ratio_ci([1.2, 0.8, 1.1, 0.9], resamples=2000)
    assert stats.verdict(noisy, 0.01).call == "within noise"
    assert "not significant" in stats.verdict(noisy, 0.01).text
    assert stats.verdict(big, None).call == "no noise floor"
    assert stats.verdict(stats.ratio_ci([3.0, 3.0]), 0.01).call == "insufficient data"


def test_slowdowns_are_called_too():
    v = stats.verdict(stats.ratio_ci([0.5, 0.52, 0.49, 0.51], resamples=2000), 0.02)
    assert v.call == "slower"


def test_outliers_are_flagged_not_removed():
    flags = stats.outlier_flags([10.0, 10.1, 9.9, 10.05, 25.0])
    assert flags == [False, False, False, False, True]


def test_refuses_to_combine_disagreeing_metadata():
    doc = {"quant": "q4_0", "workload": "tg64", "threads": 2,
           "samples": [sample("a", 0, 1.0), sample("b", 0, 1.0, thp="always")]}
    with pytest.raises(LadderError, match="disagree on thp"):
        stats.check_combinable(doc)
    doc["samples"] = [sample("a", 0, 1.0), sample("a", 1, 1.0, build_key="other")]
    with pytest.raises(LadderError, match="rung a has samples from builds"):
        stats.check_combinable(doc)
