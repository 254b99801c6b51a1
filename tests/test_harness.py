"""The one round loop (ladder.measuring.harness) with a synthetic experiment: no process runs.
What a bench cell, a serving experiment and a load get from it alike: seeded shuffled orders, the
records completed with round, attempt, position and disturbance, a disturbed round measured
again, a failure as the rung's status, and the placement checked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from conftest import measure_block
from ladder.core.errors import LadderError
from ladder.measuring import harness


@dataclass
class Scripted(harness.Experiment):
    """Each process gives a level row and two requests (a load's two kinds of record); the
    machine share, failures and CPUs seen come from a script keyed by (rung, round, attempt)."""

    name: str
    busy: dict = field(default_factory=dict)
    fails: dict = field(default_factory=dict)
    seen: list | None = None
    ran: list = field(default_factory=list)

    def process(self, cell, policy, at):
        key = (at.name, at.rnd, at.attempt)
        self.ran.append(key)
        if key in self.fails:
            return harness.Outcome({}, {}, self.seen, self.fails[key], crashed=True, raw="x.log")
        return harness.Outcome(
            {"levels": [{"level": "c1", "value": at.rnd}],
             "requests": [{"i": 0}, {"i": 1}]},
            {"foreign_cpu_share": self.busy.get(key, 0.0), "steal_share": 0.0, "ncpu": 2},
            self.seen, note="ok")


def _cell(tmp_path, names=("a", "b", "c")):
    rungs = []
    for n in names:
        prov = tmp_path / f"{n}.json"
        prov.write_text(json.dumps({"status": "ok", "bin_dir": str(tmp_path), "build_key": n}))
        rungs.append({"name": n, "provenance": str(prov), "runtime": {}})
    return harness.open_cell("load/q4_0/t1", rungs, str(tmp_path / "raw"), seed=7)


def _policy(**over):
    block = {**{k: v for k, v in measure_block().items() if k in ("disturbance", "cpus")},
             "rounds": 3, "timeout_s": 60, "warmup_rounds": 0, "repetitions": 1,
             "round_statistic": "mean", "warmup": True, "seed": 7, "cpus": "none", **over}
    return harness.policy_from(block, threads=1)


def test_every_kind_of_record_is_completed_and_the_orders_are_the_seeds(tmp_path):
    cell, exp = _cell(tmp_path), Scripted("load/q4_0/t1")
    policy = _policy()
    harness.measure(exp, cell, policy)
    assert cell.used_orders == harness.round_orders(["a", "b", "c"], 3, 7, "load/q4_0/t1")
    assert [k[:2] for k in exp.ran] == [(n, r) for r, o in enumerate(cell.used_orders) for n in o]
    levels, reqs = cell.records["levels"], cell.records["requests"]
    assert len(levels) == 9 and len(reqs) == 18
    for rec in levels + reqs:
        assert {"rung", "round", "attempt", "order", "warmup", "disturbed", "build_key",
                "foreign_cpu_share"} <= set(rec)
        assert rec["build_key"] == rec["rung"] and rec["disturbed"] is None
    meta = harness.cell_meta(cell, policy)
    assert meta["rounds"] == 3 and meta["retire"] is None and meta["disturbance"]["unresolved"] == []


def test_a_disturbed_round_of_any_experiment_is_measured_again(tmp_path):
    cell = _cell(tmp_path)
    exp = Scripted("load/q4_0/t1", busy={("b", 1, 0): 0.6})
    harness.measure(exp, cell, _policy())
    assert cell.remeasured == [{"round": 1, "attempt": 0,
                                "reasons": ["b: other processes used 60 % of the CPUs"]}]
    marked = [r for r in cell.records["levels"] if r["disturbed"]]
    assert sorted(r["rung"] for r in marked) == ["a", "b", "c"]  # the whole attempt set aside
    assert all(r["round"] == 1 and r["attempt"] == 0 for r in marked)
    again = [r for r in cell.records["levels"] if r["round"] == 1 and not r["disturbed"]]
    assert sorted(r["rung"] for r in again) == ["a", "b", "c"] and {r["attempt"] for r in again} == {1}
    assert len(cell.used_orders) == 4


def test_a_failure_is_the_rungs_status_and_it_is_not_run_again(tmp_path):
    cell = _cell(tmp_path)
    exp = Scripted("load/q4_0/t1", fails={("c", 0, 0): "llama-server died"})
    harness.measure(exp, cell, _policy())
    assert cell.status["c"]["status"] == "crashed" and cell.status["c"]["reason"] == "llama-server died"
    assert [k for k in exp.ran if k[0] == "c"] == [("c", 0, 0)]
    assert {r["rung"] for r in cell.records["levels"]} == {"a", "b"}


def test_a_process_seen_off_the_cells_cpus_fails_the_cell(tmp_path):
    cell = _cell(tmp_path)
    policy = _policy(cpus="auto")
    if policy.cpu_list is None:
        pytest.skip("no CPU placement on this host")
    exp = Scripted("load/q4_0/t1", seen=sorted(set(range(64)) - set(policy.cpu_list))[:1])
    with pytest.raises(LadderError, match="CPU placement mismatch"):
        harness.measure(exp, cell, policy)


def test_the_policy_takes_its_defaults_from_the_schema_only():
    block = measure_block()
    p = harness.policy_from(block, threads=1, phase="decode")
    assert p.limits == block["disturbance"] and p.retire["looks"] == block["retire"]["looks"]
    assert p.delta == block["retire"]["threshold"]["decode"] and p.rounds_rule is None
    with pytest.raises(KeyError):
        harness.policy_from({k: v for k, v in block.items() if k != "disturbance"}, threads=1)
