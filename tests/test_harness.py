"""The one round loop (ladder.measuring.harness) with a synthetic experiment: no process runs.
What a bench cell, a serving experiment and a load get from it alike: seeded shuffled orders, the
records completed with round, attempt, position and disturbance, a disturbed round measured
again, a failure as the rung's status, and the placement checked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from conftest import ROOT, ladder_cell, measure_block, sequential_policy
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


# --- the anytime-valid design (issue 56): a look after every round, a budget per cell --------

@dataclass
class Speeds(harness.Experiment):
    """A bench-like experiment with no process: each rung's tokens/s is its ``speed`` times a
    seeded log-normal round noise of SD ``sd``; each process takes ``seconds`` on a fake
    clock (``clock``, read by the harness through ``time.monotonic``)."""

    name: str
    speed: dict
    sd: float = 0.02
    seconds: float = 1.0
    clock: list = field(default_factory=lambda: [0.0])
    ran: list = field(default_factory=list)

    def process(self, cell, policy, at):
        import zlib

        import numpy as np

        self.ran.append((at.name, at.rnd))
        self.clock[0] += self.seconds
        rng = np.random.default_rng(zlib.crc32(f"{at.name}/{at.rnd}/{at.attempt}".encode()))
        tps = self.speed[at.name] * float(np.exp(self.sd * rng.standard_normal()))
        return harness.Outcome({"samples": [{"rep": 0, "tokens_per_s": tps}]},
                               {"foreign_cpu_share": 0.0, "steal_share": 0.0, "ncpu": 2},
                               None, note="ok")


_ladder_cell = ladder_cell
_sequential_policy = sequential_policy


def _clocked(monkeypatch, exp):
    monkeypatch.setattr(harness.time, "monotonic", lambda: exp.clock[0])


def test_each_comparison_is_measured_until_it_is_decided(tmp_path, monkeypatch):
    """The floor's 20x step is decided within the first looks and the floor leaves the rounds;
    the equal vendor step is decided equivalent later, and then the cell stops: no round is
    measured once every call is decided (the A/A pair, a check on those calls' rounds, ran in
    every one of them)."""
    exp = Speeds("q4_0/pp128/t2", {"floor": 1.0, "native_repack": 20.0, "vendor": 20.0,
                                   "control": 20.0})
    _clocked(monkeypatch, exp)
    cell, policy = _ladder_cell(tmp_path), _sequential_policy()
    assert policy.retire is None and policy.rounds_rule is None and policy.horizon == 28
    harness.measure(exp, cell, policy)
    d = cell.decided
    assert d["step:floor:native_repack"]["decision"] == "faster"
    assert d["step:floor:native_repack"]["at"] <= 5 and cell.retired["floor"] <= 5
    assert d["step:native_repack:vendor"]["decision"] == "equivalent"
    assert {r for n, r in exp.ran if n == "control"} == set(range(d["step:native_repack:vendor"]["at"]))
    assert cell.stopped == "decided"
    last = max(x["at"] for x in d.values())
    assert max(r for _, r in exp.ran) == last - 1 < 27  # rounds count from 0, looks from 1
    assert not [r for n, r in exp.ran if n == "floor" and r >= cell.retired["floor"]]
    meta = harness.cell_meta(cell, policy)["sequential"]
    assert meta["stopped"] == "decided" and meta["measured_rounds"] == last
    assert meta["threshold"] == 0.05 and meta["left"]["floor"] == cell.retired["floor"]


def test_the_control_and_its_twin_stay_while_any_comparison_is_open(tmp_path, monkeypatch):
    """A vendor step of 4 % in noise of 6 % is not decided within the cap: the A/A pair is
    decided equivalent long before, yet the control runs every round the open step does
    (the A/A check covers every round a call rests on); the cell stops at the cap."""
    exp = Speeds("q4_0/pp128/t2", {"floor": 1.0, "native_repack": 20.0, "vendor": 20.8,
                                   "control": 20.0}, sd=0.06)
    _clocked(monkeypatch, exp)
    cell, policy = _ladder_cell(tmp_path), _sequential_policy(max=12)
    # (the A/A pair alone, a cell's one comparison when nothing else is there, is decided too)
    harness.measure(exp, cell, policy)
    assert "step:native_repack:vendor" not in cell.decided and cell.stopped == "cap"
    for name in ("native_repack", "vendor", "control"):
        assert {r for n, r in exp.ran if n == name} == set(range(12)), name


def test_a_step_out_of_reach_is_closed_and_the_cell_stops(tmp_path, monkeypatch):
    """With futility on, a vendor step whose estimate sits on δ after ``after`` rounds (these
    seeded rounds: +4.9 % at δ 5 %, noise 3 %) is closed as out of the design's reach
    (non-binding: reported as it stands), and with nothing else open the cell stops there
    instead of going on toward the cap."""
    exp = Speeds("q4_0/pp128/t2", {"floor": 1.0, "native_repack": 20.0, "vendor": 20.5,
                                   "control": 20.0}, sd=0.03)
    _clocked(monkeypatch, exp)
    cell = _ladder_cell(tmp_path)
    policy = _sequential_policy(max=12, futility={"enabled": True, "after": 6, "margin": 2})
    assert policy.sequential["futility"] == {"enabled": True, "after": 6, "margin": 2.0}
    harness.measure(exp, cell, policy)
    d = cell.decided["step:native_repack:vendor"]
    assert d["decision"] == "futile" and 6 <= d["at"] < 12, d
    assert cell.stopped == "decided" and len(cell.round_seconds) == d["at"]
    assert not any(k.startswith("aa:") and v["decision"] == "futile"
                   for k, v in cell.decided.items())


def test_a_cell_stops_on_its_budget_and_says_so(tmp_path, monkeypatch):
    """Each process takes 1 s (a fake clock): an allowance of 20 s gives rounds of 4 rungs
    until the next would overrun (never fewer than 3), and the cell records why it stopped."""
    exp = Speeds("q4_0/pp128/t2", {"floor": 1.0, "native_repack": 20.0, "vendor": 20.8,
                                   "control": 20.0}, sd=0.06)
    _clocked(monkeypatch, exp)
    cell, policy = _ladder_cell(tmp_path), _sequential_policy(budget_s=20.0)
    harness.measure(exp, cell, policy)
    assert cell.stopped == "budget" and cell.spent_s <= 20.0
    assert 3 <= len(cell.round_seconds) <= 5
    meta = harness.cell_meta(cell, policy)["sequential"]
    assert meta["budget_s"] == 20.0 and meta["stopped"] == "budget"
    tiny = _ladder_cell(tmp_path / "t")
    exp2 = Speeds("q4_0/pp128/t2", exp.speed, sd=0.06)
    _clocked(monkeypatch, exp2)
    harness.measure(exp2, tiny, _sequential_policy(budget_s=1.0))
    assert len(tiny.round_seconds) == 3 and tiny.stopped == "budget"  # the fewest judged


def test_a_failed_rung_is_not_waited_for(tmp_path, monkeypatch):
    """A rung that crashed gets no more rounds, and its open comparisons do not keep the cell
    running: the rest is decided and the cell stops."""
    exp = Speeds("q4_0/pp128/t2", {"floor": 1.0, "native_repack": 20.0, "vendor": 20.0,
                                   "control": 20.0})
    _clocked(monkeypatch, exp)

    def crash(cell, policy, at, inner=exp.process):
        if at.name == "vendor":
            return harness.Outcome({}, {}, None, "SIGILL", crashed=True, raw="x.log")
        return inner(cell, policy, at)

    exp.process = crash  # type: ignore[method-assign]
    cell = _ladder_cell(tmp_path)
    harness.measure(exp, cell, _sequential_policy())
    assert cell.status["vendor"]["status"] == "crashed" and cell.stopped == "decided"
    assert not any(k.endswith(":vendor") for k in cell.decided)


def test_the_sequential_settings_are_checked():
    with pytest.raises(LadderError, match="measure.sequential.max 2"):
        _sequential_policy(max=2)
    assert harness.policy_from(measure_block(), threads=1, phase="decode").sequential is None


class Killed(Exception):
    """Stands in for the job being killed mid-cell."""


def test_a_killed_cell_continues_from_its_last_round(tmp_path, monkeypatch):
    """Issue 56, faults: the cell's state (records, decisions, orders) and its raw files are
    kept after every round beside the job's log; the next run of the same cell continues
    after the last whole round with the same orders, measures none of the kept rounds again,
    and removes the state when the cell ends. A state of other settings is set aside."""
    speed = {"floor": 1.0, "native_repack": 20.0, "vendor": 20.8, "control": 20.0}
    rungs = _ladder_cell(tmp_path / "r").rungs
    block = {**{k: v for k, v in measure_block().items() if k in ("disturbance", "cpus")},
             "rounds": 3, "timeout_s": 60, "warmup_rounds": 1, "repetitions": 1,
             "round_statistic": "mean", "warmup": True, "seed": None, "cpus": "none",
             "sequential": {**measure_block()["sequential"], "enabled": True, "max": 10}}
    paths = harness.Paths("m.json", str(tmp_path / "raw"), str(tmp_path / "out.json"),
                          str(tmp_path / "job.log"))
    first = Speeds("q4_0/pp128/t2", speed, sd=0.06)
    _clocked(monkeypatch, first)
    inner = first.process

    def dies(cell, policy, at):
        if at.rnd == 5 and at.pos == 1:
            raise Killed
        out = inner(cell, policy, at)
        (cell.raw / f"{at.stem.name}.json").write_text("{}")  # a raw file, as a process leaves
        return out

    first.process = dies  # type: ignore[method-assign]
    with pytest.raises(Killed):
        harness.run_cell(first, rungs, block, paths, (2, "prefill", None))
    state = tmp_path / "job.state"
    kept = json.loads((state / "state.json").read_text())
    assert kept["next_round"] == 5 and len(list((state / "raw").iterdir())) > 0
    import shutil

    shutil.rmtree(tmp_path / "raw")  # what Snakemake does with a killed job's outputs
    again = Speeds("q4_0/pp128/t2", speed, sd=0.06)
    _clocked(monkeypatch, again)
    cell, policy, meta = harness.run_cell(again, rungs, block, paths, (2, "prefill", None),
                                          budget_s=900.0)
    assert policy.budget_s == 900.0 and meta["sequential"]["budget_s"] == 900.0
    assert min(r for _, r in again.ran) == 5  # rounds 0-4 kept, not measured again
    assert cell.seed == kept["seed"] and cell.used_orders[:5] == kept["used_orders"][:5]
    assert meta["resumed"]["after_round"] == 5 and meta["seed_source"] == "fresh (resumed)"
    assert {s["round"] for s in cell.samples} >= set(range(5))
    # the kept rounds' raw files are back where the result's samples say they are
    assert {f.name for f in (tmp_path / "raw").iterdir()} >= {
        f"{harness.raw_stem(0, 0, 0, kept['used_orders'][0][0])}.json"}
    assert not state.exists()
    # a state left by other settings is set aside, not continued
    first2 = Speeds("q4_0/pp128/t2", speed, sd=0.06)
    _clocked(monkeypatch, first2)
    keep = dict(kept, identity="other")
    state.mkdir()
    (state / "state.json").write_text(json.dumps(keep))
    cell2, _, meta2 = harness.run_cell(first2, rungs, block, paths, (2, "prefill", None))
    assert meta2["resumed"] is None and min(r for _, r in first2.ran) == 0
    assert list(tmp_path.glob("job.stale-*"))


def test_the_serving_policy_is_the_protocols_beside_the_bench():
    """Issue 60, item 7: serving's measuring policy lives in ``planning.protocol`` (it was
    written in common.smk): one process per rung and round, no warm-up round, its round the
    mean, the bench cells' design up to serving.max_rounds, and it builds a harness policy."""
    from ladder.planning import protocol
    from ladder.planning.config import schema_defaults

    serving = schema_defaults(ROOT / "workflow" / "schemas" / "config.schema.yaml", "serving")
    block = protocol.serving_policy(measure_block(), serving)
    assert (block["warmup_rounds"], block["repetitions"], block["round_statistic"]) == (
        0, 1, "mean")
    assert block["sequential"]["max"] == serving["max_rounds"]
    assert block["rounds"] == serving["rounds"] and block["timeout_s"] == serving["timeout_s"]
    p = harness.policy_from(block, threads=1, phase="decode")
    assert p.limits == measure_block()["disturbance"]
    assert "def serving_policy" in (ROOT / "workflow" / "rules" / "common.smk").read_text()
    assert '"warmup_rounds": 0' not in (ROOT / "workflow" / "rules" / "common.smk").read_text()
