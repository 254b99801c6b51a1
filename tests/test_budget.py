"""The run's measuring budget (issue 56, ladder.planning.budget), and how a cell of the
anytime-valid design is judged and reported (ladder.analysis.stats): its repeated interval,
δ on the interval, and why each comparison stopped being measured."""

from __future__ import annotations

import math

import pytest

from ladder.analysis import stats
from ladder.measuring import harness
from ladder.planning import budget, sequential
from test_harness import Speeds, _clocked, _ladder_cell, _sequential_policy


def test_a_cell_gets_what_the_finished_cells_left_shared_by_the_cells_still_open(tmp_path):
    path = budget.ledger_path("local", "run1", root=tmp_path)
    assert path == tmp_path / "logs" / "budget" / "run1" / "local.jsonl"
    first = budget.allowance(600, 6, "a", budget.read_ledger(path))
    assert first["allowance_s"] == 100 and first["finished"] == 0
    budget.record(path, "a", 20.0, 100.0, "decided")  # decided early: 80 s left to the rest
    budget.record(path, "b", 100.0, 100.0, "budget")
    second = budget.allowance(600, 6, "c", budget.read_ledger(path))
    assert second["allowance_s"] == pytest.approx(480 / 4)
    assert second["spent_by_finished_s"] == 120
    # a cell measured again in the same run does not count its own earlier line
    assert budget.allowance(600, 6, "a", budget.read_ledger(path))["finished"] == 1
    with path.open("a") as f:  # a torn last line (a job killed mid-write) is left out
        f.write('{"cell": "d", "spe')
    assert len(budget.read_ledger(path)) == 2
    assert budget.allowance(None, 6, "c", []) is None
    assert budget.ledger_path("local", "") is None  # no run identity: the even share


def test_an_overrun_budget_still_gives_each_cell_the_fewest_rounds(tmp_path):
    path = budget.ledger_path("local", "run2", root=tmp_path)
    budget.record(path, "a", 900.0, 100.0, "budget")
    assert budget.allowance(600, 3, "b", budget.read_ledger(path))["allowance_s"] == 0


def _doc(cell, policy):
    return {**harness.cell_meta(cell, policy), "quant": "q4_0", "workload": "pp128",
            "workload_spec": {"n_prompt": 128, "n_gen": 0}, "threads": 2,
            "samples": cell.samples}


def _measured(tmp_path, monkeypatch, speed, sd, **seq):
    exp = Speeds("q4_0/pp128/t2", speed, sd=sd)
    _clocked(monkeypatch, exp)
    cell, policy = _ladder_cell(tmp_path), _sequential_policy(**seq)
    harness.measure(exp, cell, policy)
    return stats.summarize_cell(_doc(cell, policy), ["floor", "native_repack", "vendor"],
                                "control", "native_repack", resamples=200)


def test_a_sequential_cell_is_judged_on_its_repeated_interval(tmp_path, monkeypatch):
    """Every comparison of a sequential cell carries the design's repeated interval (wider than
    the fixed-n t-interval at the same rounds), says why it stopped, and is called "at least δ"
    only when the interval lies wholly beyond δ."""
    out = _measured(tmp_path, monkeypatch, {"floor": 1.0, "native_repack": 20.0,
                                            "vendor": 20.0, "control": 20.0}, 0.02)
    floor_step = out["steps"][0]
    assert floor_step["ratio"]["design_max"] == 28 and "repeated" in floor_step["ratio"]["method"]
    assert floor_step["verdict"]["call"] == "faster" and floor_step["verdict"]["beyond_threshold"]
    assert floor_step["stop"]["why"] == "decided" and floor_step["stop"]["rounds"] <= 5
    assert "decided (faster) after" in floor_step["verdict"]["text"]
    vendor = out["steps"][1]
    assert vendor["verdict"]["call"] == "equivalent", vendor["verdict"]["text"]
    r = stats.RatioEstimate(**vendor["ratio"])
    fixed = stats.ratio_ci(r.per_round)
    assert (math.log(r.hi) - math.log(r.lo)) > (math.log(fixed.hi) - math.log(fixed.lo))
    nf = out["noise_floor"]
    assert nf["stop"]["why"] == "calls decided" and "measured until every comparison decided" \
        in nf["text"]
    assert f"measured over the {nf['aa']['rounds']} rounds the cell's calls rest on" in \
        nf["stop"]["text"]


def test_an_open_comparison_says_what_would_decide_it(tmp_path, monkeypatch):
    """A 4 % step in 6 % noise at a cap of 12 rounds is open at the cap: reported as it stands
    (inconclusive, or faster with less than δ not ruled out), with the rounds that would
    decide it at the noise and effect measured."""
    out = _measured(tmp_path, monkeypatch, {"floor": 1.0, "native_repack": 20.0,
                                            "vendor": 20.8, "control": 20.0}, 0.06, max=12)
    vendor = out["steps"][1]
    v, stop = vendor["verdict"], vendor["stop"]
    assert stop["why"] == "cap" and stop["rounds"] == 12
    assert v["call"] in ("inconclusive", "faster") and v.get("beyond_threshold") is not True
    assert "open after 12 rounds: the design's maximum (12 rounds)" in v["text"]
    need = stop["rounds_to_decide"]
    assert need is None or need > 12
    if need:
        assert f"~{need} rounds would decide it" in v["text"]


def test_a_comparison_closed_for_futility_is_reported_as_it_stands(tmp_path, monkeypatch):
    """A vendor step whose estimate sits on δ, closed out of the design's reach (futility on):
    judged on its repeated interval at the look that closed it, its stop "futile" with the look
    and what would decide it; the run summary counts it among the open ones."""
    out = _measured(tmp_path, monkeypatch, {"floor": 1.0, "native_repack": 20.0,
                                            "vendor": 20.5, "control": 20.0}, 0.03, max=12,
                    futility={"enabled": True, "after": 6, "margin": 2})
    vendor = out["steps"][1]
    v, stop = vendor["verdict"], vendor["stop"]
    assert stop["why"] == "futile" and stop["at"] == stop["rounds"] < 12, stop
    assert v.get("beyond_threshold") is not True and v["call"] != "equivalent"
    assert (f"open after {stop['rounds']} rounds: out of the design's reach, stopped for "
            "futility") in v["text"]
    assert stop["rounds_to_decide"] is None or stop["rounds_to_decide"] > 12
    got = stats.budget_summary([out])
    assert got["by_reason"]["futile"] == 1
    assert any(o["why"] == "futile" for o in got["open"])
    assert "every comparison decided or out of reach" in out["noise_floor"]["text"]


def test_rounds_to_decide_follows_the_gap_to_the_threshold():
    band = 0.05
    far = stats.rounds_to_decide(math.log(1.5), 0.1, 1.0, 28, 0.05, band)
    near = stats.rounds_to_decide(math.log(1.07), 0.1, 1.0, 28, 0.05, band)
    assert far is not None and near is not None and far < near
    assert stats.rounds_to_decide(math.log1p(band), 0.1, 1.0, 28, 0.05, band) is None
    # where it falls inside the design, the interval at that look really decides
    n = stats.rounds_to_decide(math.log(1.3), 0.1, 1.0, 28, 0.05, band)
    assert n is not None and n <= 28
    half = sequential.look_critical(n, 28, 0.05) * 0.1 / math.sqrt(n)
    assert math.log(1.3) - half >= math.log1p(band)


def test_the_run_says_which_comparisons_the_budget_left_open(tmp_path, monkeypatch):
    """A cell stopped by its budget: the run-level summary counts the comparisons by why they
    stopped, names the open ones and the minutes that would decide them."""
    exp = Speeds("q4_0/pp128/t2", {"floor": 1.0, "native_repack": 20.0, "vendor": 20.8,
                                   "control": 20.0}, sd=0.06)
    _clocked(monkeypatch, exp)
    cell, policy = _ladder_cell(tmp_path), _sequential_policy(budget_s=40.0)
    harness.measure(exp, cell, policy)
    assert cell.stopped == "budget"
    out = stats.summarize_cell(_doc(cell, policy), ["floor", "native_repack", "vendor"],
                               "control", "native_repack", resamples=200)
    got = stats.budget_summary([out])
    assert got["by_reason"].get("budget", 0) >= 1
    assert any("vendor over native_repack" in o["comparison"] for o in got["open"])
    assert "Left open by the budget" in got["text"] and "more minutes" in got["text"]
    assert stats.budget_summary([{"steps": [], "vs_floor": []}]) is None
