"""Issue 18: a disturbed round is noticed per run and measured again, never averaged in.

The judgement is pure (ladder.measuring.harness.disturbed, ladder.core.run.machine_share). The runner test below
replays a real llama-bench JSON (tests/fixtures/x86_64/llama-bench-amx-q4_0-tg8.json) from a
stand-in binary that spins one CPU for 0.4 s, while a real CPU hog competes for the machine's
CPUs during the first round: what is under test is the runner's bookkeeping, not llama-bench.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import measure_block
from ladder.analysis import stats
from ladder.measuring.bench import bench_cell, measure
from ladder.measuring.harness import Paths, check_placement, disturbed
from ladder.core.errors import LadderError
from ladder.core.machine import cpu_set
from ladder.core.records import CellDoc, RungStatus, Sample
from ladder.core.run import machine_share

FIX = Path(__file__).parent / "fixtures" / "x86_64" / "llama-bench-amx-q4_0-tg8.json"
LIMITS = {"foreign_cpu_max": 0.10, "steal_max": 0.05, "max_remeasure": 6}


def test_machine_share_counts_what_others_used():
    hz = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count()
    # 2 s of wall time; the machine was busy 3 s in all, of which the tool used 1.9 s, us 0.1 s
    m = machine_share((0, 0, 0), (3 * hz, int(0.2 * hz), 0), 2.0, 1.9, 0.1)
    assert m["foreign_cpu_share"] == pytest.approx(1.0 / (2.0 * ncpu), abs=1e-3)
    assert m["steal_share"] == pytest.approx(0.2 / (2.0 * ncpu), abs=1e-3)
    assert machine_share(None, (1, 1, 1), 1.0, 0, 0) == {}


def test_disturbed_names_why():
    assert disturbed({"foreign_cpu_share": 0.02, "steal_share": 0.0}, LIMITS) is None
    assert disturbed({"foreign_cpu_share": 0.35}, LIMITS) == "other processes used 35 % of the CPUs"
    assert disturbed({"foreign_cpu_share": 0.0, "steal_share": 0.2}, LIMITS) == (
        "the hypervisor stole 20 % of the CPUs")


def test_a_job_sharing_its_node_is_disturbed_only_beyond_the_cpus_it_was_not_given():
    # a 1-CPU SLURM job on a 2-core node: another job on the other core (50 % of the node) is
    # not taking this job's CPU; 75 % of the node is half of this job's one CPU
    busy_other = {"foreign_cpu_share": 0.50, "steal_share": 0.0, "ncpu": 2}
    assert disturbed(busy_other, LIMITS) == "other processes used 50 % of the CPUs"
    assert disturbed(busy_other, LIMITS, own_cpus=1) is None
    assert disturbed({**busy_other, "foreign_cpu_share": 0.75}, LIMITS, own_cpus=1) == (
        "other processes used 50 % of the job's 1 CPUs")
    assert disturbed(busy_other, LIMITS, own_cpus=2) == "other processes used 50 % of the CPUs"


def test_unresolved_rounds_say_disturbed_never_within_noise():
    def s(rung, rnd, tps, bad=None):
        return {"rung": rung, "round": rnd, "tokens_per_s": tps, "build_key": rung,
                "disturbed": bad, "warmup": False}
    samples = [s(r, n, 10.0 * (1 + 0.01 * n)) for r in ("a", "b", "c", "t") for n in range(2)]
    samples += [s(r, 2, 3.0, "other processes used 60 % of the CPUs") for r in ("a", "b", "c", "t")]
    doc = {"quant": "q", "workload": "w", "threads": 2, "samples": samples,
           "disturbance": {"remeasured": [{"round": 2, "attempt": 3, "reasons": ["x"]}],
                           "unresolved": [2]}}
    cell = stats.summarize_cell(doc, ["a", "b"], "c", "t")
    v = cell["steps"][0]["verdict"]
    assert v["call"] == "disturbed" and "round(s) 2 stayed disturbed" in v["text"]
    assert cell["rungs"]["a"]["n"] == 2  # the disturbed samples never entered
    assert cell["disturbance"]["unresolved"] == [2]


SPIN = ("import time, sys\nt = time.process_time()\n"
        "while time.process_time() - t < 0.4: pass\n"
        f"sys.stdout.write(open({str(FIX)!r}).read())\n")


def _stand_in(tmp_path, body=SPIN):
    """A llama-bench stand-in (by default: spins one CPU for 0.4 s and prints a real
    llama-bench JSON), its provenance and a model record: what bench.measure needs to run
    rounds."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "llama-bench"
    fake.write_text(f"#!{sys.executable}\n{body}")
    fake.chmod(0o755)
    prov = tmp_path / "prov.json"
    prov.write_text(json.dumps({"status": "ok", "bin_dir": str(bindir), "build_key": "k"}))
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"path": str(tmp_path / "m.gguf"), "model": "m", "quant": "Q4_0"}))
    return fake, prov, model


def _jittering_stand_in(tmp_path, scaled: bool):
    """The stand-in replaying the real JSON, times 1 + JITTER * a fixed sequence drawn once per
    jittered process (counted in a file: the same on every machine, busy or not), and times
    SCALE when ``scaled``."""
    count = tmp_path / "count"
    return _stand_in(tmp_path, (
        f"import json, os\nd = json.load(open({str(FIX)!r}))\nj = 0.0\n"
        "if os.environ.get('JITTER'):\n"
        f"    c = int(open({str(count)!r}).read()) if os.path.exists({str(count)!r}) else 0\n"
        f"    open({str(count)!r}, 'w').write(str(c + 1))\n"
        "    j = [0.9, -0.8, 0.5, -0.6, 0.7, -0.9, 0.3, -0.4][c % 8] * float(os.environ['JITTER'])\n"
        + ("f = float(os.environ['SCALE']) * (1 + j)\n" if scaled else "f = 1 + j\n")
        + "for r in d: r['samples_ts'] = [x * f for x in r['samples_ts']]\n"
        "print(json.dumps(d))\n"))


def _measure(tmp_path, model, rungs, **block):
    """bench.measure on a tg8 cell of 2 threads, seed 1, no warmup round, over the schema's
    measure defaults."""
    block = measure_block(**{"seed": 1, "warmup": False, "timeout_s": 60, "warmup_rounds": 0,
                             **block})
    return measure(bench_cell("q4_0", "tg8", {"n_prompt": 0, "n_gen": 8}, 2, str(model)),
                   rungs, block, Paths(str(model), str(tmp_path / "raw"),
                                       str(tmp_path / "out.json"), str(tmp_path / "log")))


def _retiring_measure(tmp_path, prov, model, rungs, rounds, **kw):
    """bench.measure on a tg8 cell with fixed rounds and the default early looks (3, 5, 10),
    disturbance checks off."""
    return _measure(tmp_path, model, rungs, rounds=rounds,
                    disturbance={**LIMITS, "foreign_cpu_max": 1.0, "steal_max": 1.0}, **kw)


def test_a_cell_runs_its_fixed_rounds_and_records_where(tmp_path):
    """Issue 31: no early stop because a cell looks settled (one JSON for every rung: every
    ratio exactly 1, an A/A "equivalent" from the first look); every process ran on the cell's
    CPU set, read back from /proc and recorded with each sample."""
    _, prov, model = _stand_in(tmp_path)
    rungs = [{"name": n, "provenance": str(prov), "runtime": {}, "env": {}, "bench_argv": [],
              "twin_of": "native_repack" if n == "control" else None}
             for n in ("floor", "native_repack", "control")]
    doc = _retiring_measure(tmp_path, prov, model, rungs, 6)
    assert doc["rounds"] == 6 and doc["retire"]["retired"] == {}
    assert doc["seed"] == 1 and doc["seed_source"] == "measure.seed"
    assert {s["round"] for s in doc["samples"]} == set(range(6))
    want = cpu_set(2)
    assert doc["cpus"] == want
    # the records are what their types say (ladder.core.records): every key declared, the
    # required ones present
    for record, typed in ((doc, CellDoc), *((s, Sample) for s in doc["samples"]),
                          *((st, RungStatus) for st in doc["rungs"].values())):
        assert set(record) <= set(typed.__annotations__), set(record) - set(typed.__annotations__)
        assert typed.__required_keys__ <= set(record), typed.__required_keys__ - set(record)
    assert all(s["cpus"] == ",".join(map(str, want)) and set(s["cpus_seen"]) <= set(want)
               for s in doc["samples"])


def test_a_gross_step_is_retired_and_the_rest_run_on(tmp_path):
    """Issue 31: the floor is 20x slower and its step is called at the strict interim level at
    the first look, so it is not run again; the control wanders (±40 %) and with its twin and
    native_repack runs every round. The stand-in scales the real JSON by SCALE and a JITTER
    drawn per process."""
    _, prov, model = _jittering_stand_in(tmp_path, scaled=True)
    env = {"floor": {"SCALE": "0.05"}, "native_repack": {"SCALE": "1"},
           "control": {"SCALE": "1", "JITTER": "0.4"}}
    rungs = [{"name": n, "provenance": str(prov), "runtime": {}, "env": env[n], "bench_argv": [],
              "twin_of": "native_repack" if n == "control" else None} for n in env]
    doc = _retiring_measure(tmp_path, prov, model, rungs, 8)
    assert doc["retire"]["retired"] == {"floor": 3}, doc["retire"]
    assert doc["rounds"] == 8 and doc["retire"]["threshold"] == 0.03  # tg8: decode
    rounds_of = {n: sorted({s["round"] for s in doc["samples"] if s["rung"] == n}) for n in env}
    assert rounds_of["floor"] == [0, 1, 2]
    assert rounds_of["native_repack"] == rounds_of["control"] == list(range(8))
    cell = stats.summarize_cell(doc, ["floor", "native_repack"], "control", "native_repack")
    assert cell["steps"][0]["verdict"]["call"] == "faster"


def test_the_pilot_chooses_a_cells_rounds(tmp_path):
    """measure.rounds_from_noise, through real processes (the stand-in): a quiet A/A pair (one
    JSON for every rung: every ratio exactly 1) gets the minimum after its pilot; a control that
    wanders ±40 % gets the cap, said in the cell's rounds_plan."""
    rule = {**measure_block()["rounds_from_noise"], "enabled": True, "pilot": 3, "min": 4,
            "max": 5, "target": 0.05}
    _, prov, model = _jittering_stand_in(tmp_path, scaled=False)
    for jitter, want, capped in (("", 4, False), ("0.4", 5, True)):
        env = {"native_repack": {}, "control": {"JITTER": jitter} if jitter else {}}
        rungs = [{"name": n, "provenance": str(prov), "runtime": {}, "env": env[n],
                  "bench_argv": [], "twin_of": "native_repack" if n == "control" else None}
                 for n in env]
        doc = _retiring_measure(tmp_path / (jitter or "quiet"), prov, model, rungs, 20,
                                rounds_from_noise=rule)
        plan = doc["rounds_plan"]
        assert doc["rounds"] == plan["rounds"] == want and plan["capped"] is capped, plan
        assert plan["pilot"] == 3 and plan["target"] == 0.05 and plan["threshold"] == 0.03
        assert {s["round"] for s in doc["samples"]} == set(range(want))


def test_a_process_seen_on_other_cpus_is_a_named_error():
    check_placement([0, 1], [0, 1], "q4_0/tg8/t2 floor round 1")
    with pytest.raises(LadderError, match=r"q4_0/tg8/t2 floor round 1: CPU placement mismatch: "
                                          r"threads allowed on CPUs \[0, 1, 2\]"):
        check_placement([0, 1, 2], [0, 1], "q4_0/tg8/t2 floor round 1")
    with pytest.raises(LadderError, match="not verified"):
        check_placement([], [1], "x")


def test_the_cpu_set_avoids_cpu_0_when_there_are_spare_cpus():
    assert cpu_set(2, "auto", range(16)) == [1, 2]
    assert cpu_set(2, "auto", [0, 1]) == [0, 1]  # no spare CPU: all of them
    assert cpu_set(1, "auto", [0, 1]) == [1]
    assert cpu_set(2, "none", range(4)) is None
    # a job given 1 of a shared node's 2 CPUs, not bound to it: which is its own is unknown
    assert cpu_set(1, "auto", [0, 1], job_cpus=1) is None
    assert cpu_set(2, "auto", [0, 1], job_cpus=2) == [0, 1]
    assert cpu_set(2, [4, 6], range(8)) == [4, 6]
    with pytest.raises(LadderError, match=r"measure.cpus \[4\]: 1 CPUs for 2 threads"):
        cpu_set(2, [4], range(8))
    with pytest.raises(LadderError, match=r"CPUs \[9\] are not allowed here"):
        cpu_set(2, [1, 9], range(8))
    with pytest.raises(LadderError, match="only 2 CPUs are allowed"):
        cpu_set(4, "auto", [0, 1])


@pytest.mark.alone  # the hogs' disturbance must be the only one
@pytest.mark.skipif(os.cpu_count() is None or os.cpu_count() < 2, reason="needs 2 CPUs")
def test_a_disturbed_round_is_measured_again(tmp_path):
    fake, prov, model = _stand_in(tmp_path)
    rungs = [{"name": n, "provenance": str(prov), "runtime": {}, "env": {}, "bench_argv": []}
             for n in ("floor", "native_repack")]
    from ladder.core.run import run
    quiet = run([str(fake)])  # the stand-in alone: is the machine quiet enough to test on?
    if disturbed(quiet.machine, LIMITS):
        pytest.skip(f"the machine is busy before the test: {disturbed(quiet.machine, LIMITS)}")
    # two hogs fill both CPUs for the first ~1.2 s: the first round is disturbed
    hogs = [subprocess.Popen([sys.executable, "-c",
                              "import time\nt=time.time()\nwhile time.time()-t<1.2: pass"])
            for _ in range(os.cpu_count() or 2)]
    time.sleep(0.1)
    try:
        doc = _measure(tmp_path, model, rungs, rounds=3, disturbance=LIMITS)
    finally:
        for h in hogs:
            h.wait()
    dist = doc["disturbance"]
    assert dist["remeasured"] and dist["remeasured"][0]["round"] == 0
    assert "other processes used" in dist["remeasured"][0]["reasons"][0]
    assert dist["unresolved"] == []
    marked = [s for s in doc["samples"] if s["disturbed"]]
    assert marked and all(s["round"] == 0 for s in marked)  # the hog ran during round 0 only
    last = max(m["attempt"] for m in dist["remeasured"])
    assert all(s["attempt"] <= last for s in marked)
    clean = [s for s in doc["samples"] if not s["disturbed"]]
    assert sorted({(s["rung"], s["round"]) for s in clean}) == [
        (r, n) for r in ("floor", "native_repack") for n in range(3)]
    assert all(s["foreign_cpu_share"] <= LIMITS["foreign_cpu_max"] for s in clean)
    # every attempt's raw output is kept
    assert list((tmp_path / "raw").glob("round00a1-*-floor.json"))
    assert len(doc["orders"]) == 3 + len(dist["remeasured"])


def test_repetitions_are_calibrated_per_rung_from_the_warmup_round():
    """Issue 18, item 3: -r by time (pyperf's loop calibration): a fast rung's round is the mean
    of several repetitions, the slow floor's is its one long repetition, and a control and its
    twin always get the same count (the floor pair must be taken alike)."""
    from ladder.measuring.bench import calibrated_repetitions

    def warm(rung, seconds):
        return {"rung": rung, "warmup": True, "ns": int(seconds * 1e9)}

    rungs = [{"name": "floor"}, {"name": "native_repack"},
             {"name": "control", "twin_of": "native_repack"}, {"name": "crashed"}]
    got = calibrated_repetitions(
        [warm("floor", 4.7), warm("native_repack", 1.25), warm("control", 0.9),
         {"rung": "floor", "warmup": False, "ns": 1}],  # measured rounds never calibrate
        rungs, {"min_seconds": 3, "max": 5})
    assert got == {"floor": 1, "native_repack": 4, "control": 4, "crashed": 1}
    fast = calibrated_repetitions([warm("native_repack", 0.05)], rungs[1:2],
                                  {"min_seconds": 3, "max": 5})
    assert fast == {"native_repack": 5}


def test_auto_repetitions_run_each_rungs_own_count(tmp_path):
    """bench.measure with repetitions auto: the warmup round runs -r 1, then each rung its
    calibrated count; every repetition is a sample, and the cell records the counts."""
    _, prov, model = _stand_in(tmp_path, (
        "import json, os, sys\nd = json.load(open(" + repr(str(FIX)) + "))\n"
        "r = int(sys.argv[sys.argv.index('-r') + 1])\nns = int(float(os.environ['REP_S']) * 1e9)\n"
        "for rec in d:\n    rec['samples_ns'] = [ns] * r\n"
        "    rec['samples_ts'] = [8e9 / ns] * r\nprint(json.dumps(d))\n"))
    env = {"floor": "4.0", "native_repack": "0.5", "control": "0.5"}
    rungs = [{"name": n, "provenance": str(prov), "runtime": {}, "env": {"REP_S": env[n]},
              "bench_argv": [], "twin_of": "native_repack" if n == "control" else None}
             for n in env]
    doc = _measure(tmp_path, model, rungs, rounds=2, repetitions="auto", warmup_rounds=1,
                   disturbance={**LIMITS, "foreign_cpu_max": 1.0, "steal_max": 1.0},
                   auto_repetitions={"min_seconds": 2, "max": 5})
    assert doc["repetitions"] == "auto" and doc["repetitions_by_rung"] == {
        "floor": 1, "native_repack": 4, "control": 4}
    clean = [s for s in doc["samples"] if not s["disturbed"]]  # this machine may be busy
    per = {(s["rung"], s["round"]): 0 for s in clean}
    for s in clean:
        per[(s["rung"], s["round"])] += 1
    assert per == {("floor", 0): 1, ("native_repack", 0): 1, ("control", 0): 1,
                   ("floor", 1): 1, ("native_repack", 1): 4, ("control", 1): 4,
                   ("floor", 2): 1, ("native_repack", 2): 4, ("control", 2): 4}
    raw = next((tmp_path / "raw").glob("round01*-native_repack.stderr.log")).read_text()
    assert " -r 4 " in raw.splitlines()[0]
    with pytest.raises(Exception, match="auto takes the mean"):
        _measure(tmp_path / "2", model, rungs, rounds=2, repetitions="auto", warmup_rounds=1,
                 round_statistic="best")
