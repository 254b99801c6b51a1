"""The real workflow on the small test config: real builds, the real model, real measurements.

Slow (a cold run builds llama.cpp several times; ccache in resources/ makes reruns quick).
Deselect with `-m "not e2e"`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml
import histories
from workflow_runner import make_workdir, run_snakemake, shared_resources

ROOT = Path(__file__).resolve().parents[1]
E2E_CONFIG = ROOT / "tests" / "configs" / "e2e.yaml"
HOST = Path("results/hosts/local")  # the one local host's results

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the e2e config is the x86 ladder"),
]


snakemake = partial(run_snakemake, config=E2E_CONFIG)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # LADDER_E2E_WORKDIR reuses an earlier e2e work dir (development: only what changed reruns)
    work = make_workdir(tmp_path_factory, "LADDER_E2E_WORKDIR", "e2e")
    res = snakemake(work)
    (work / "console.log").write_text(res.stdout + res.stderr)  # what a user saw
    if res.returncode != 0:
        pytest.fail(f"workflow failed:\n{res.stderr[-6000:]}")
    return work


@pytest.fixture(scope="module")
def report(run_dir):
    return json.loads((run_dir / HOST / "report" / "ladder.json").read_text())


def has_amx() -> bool:
    flags = Path("/proc/cpuinfo").read_text()
    return " amx_tile" in flags and " amx_int8" in flags


def test_report_structure(report, run_dir):
    assert report["format"] == "ladder-report/1"
    assert report["ladder_order"] == ["floor", "native_repack", "amx", "kleidiai_x86"]
    assert report["control"] == "control" and report["twin"] == "native_repack"
    assert report["missing"] == []
    assert {(c["quant"], c["workload"], c["threads"]) for c in report["cells"]} == {
        ("q4_0", w, t) for w in ("pp16", "pp64", "tg16") for t in {1, os.cpu_count()}}
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "## The ladder" in md and "## Every cell" in md and "## Evidence per rung" in md
    assert "## Provenance" in md
    prov = report["provenance"]
    assert prov["source"]["upstream_commit"] == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert prov["source"]["upstream_commit_verified"] is True
    q4_0 = next(m for m in prov["models"] if m["quant"].lower() == "q4_0")
    assert q4_0["requantized"] is True and q4_0["requantized_from"]["quant"] == "Q4_K_M"


def test_every_sample_traces_to_a_raw_file(report, run_dir):
    decided = 0  # comparisons the anytime-valid design decided at a look
    ledger = []
    for cell in report["cells"]:
        doc = json.loads((run_dir / HOST / "bench" / "gemma3-270m" / cell["quant"] /
                          cell["workload"] / f"t{cell['threads']}.json").read_text())
        assert doc["samples"], "no samples"
        for s in doc["samples"]:
            raw = json.loads((run_dir / s["raw"]).read_text())
            assert s["tokens_per_s"] in [float(x) for x in raw[0]["samples_ts"]]
            assert s["peak_rss_kib"] > 100_000 and s["thp"] is not None
        orders = doc["orders"]
        # one order per round, and one more per re-measured (disturbed) round
        dist = doc["disturbance"]
        seq = doc["sequential"]
        assert len(orders) == doc["warmup_rounds"] + seq["measured_rounds"] + len(
            dist["remeasured"]) - len(dist["unresolved"]) and doc["rounds"] == 3
        # the anytime-valid design, for real: a look after every round up to its maximum of 3,
        # the cell's allowance from the run's budget (30 min shared by the 6 bench cells and
        # the llama-bench serving points), and the cell's line in the run's ledger
        assert seq["max"] == 3 and seq["stopped"] in {"decided", "cap"}, seq
        assert seq["measured_rounds"] == 3 and doc["rounds_plan"] is None
        assert doc["budget"]["cells"] > 6 and doc["budget"]["budget_s"] == 1800
        assert seq["budget_s"] == doc["budget"]["allowance_s"] and seq["spent_s"] > 0
        assert 0 < seq["budget_s"] <= 1800
        decided += len(seq["decided"])
        ledger += [json.loads(line) for p in (run_dir / "logs" / "budget").glob("*/local.jsonl")
                   for line in p.read_text().splitlines()]
        assert all(sorted(o) == sorted(orders[0]) for o in orders)
        assert {s["round"] for s in doc["samples"] if s["warmup"]} == {0}
        # repetitions auto: calibrated from the warmup round, the floor's (slowest) count the
        # smallest, the control's its twin's; every repetition is a sample
        reps = doc["repetitions_by_rung"]
        assert doc["repetitions"] == "auto" and reps["control"] == reps["native_repack"]
        assert 1 <= reps["floor"] <= reps["native_repack"] <= 5, reps
        clean = [s for s in doc["samples"] if not s["warmup"] and not s["disturbed"]]
        for rung in ("floor", "native_repack"):
            for rnd in {s["round"] for s in clean if s["rung"] == rung}:
                assert sum(1 for s in clean if (s["rung"], s["round"]) == (rung, rnd)) == reps[
                    rung]
        assert all(s["rep"] == 0 for s in doc["samples"] if s["warmup"])
    # the floor's 20x steps are decided at the third look (unless a round stayed disturbed)
    assert decided >= 1, "no comparison was decided"
    assert {Path(e["cell"]).name for e in ledger} >= {f"t{c['threads']}.json"
                                                      for c in report["cells"]}


def test_noise_figures_and_verdicts(report):
    mult = report["provenance"]["stats"]["multiplicity"]
    assert mult["method"] == "Benjamini-Hochberg" and mult["comparisons"] >= 1
    for cell in report["cells"]:
        nf = cell["noise_floor"]
        # the A/A figures exist; how large they are depends on the machine, not the workflow;
        # a round that stayed disturbed is left out of them and the cell says so
        lost = cell["disturbance"]["unresolved"]
        assert nf["aa"]["rounds"] == 3 - len(lost) and nf["aa"]["sd_per_round"] is not None
        assert nf["floor"] == nf["aa"]["smallest_callable"] and nf["floor"] > 0
        assert "|control/twin - 1|" in nf["text"]
        assert "measured until" in nf["text"] and nf["rounds_plan"] is None, nf["text"]
        assert nf["stop"]["why"] in {"decided", "calls decided", "cap"}
        assert len(cell["cpus"]) == cell["threads"]  # where the cell ran: one CPU per thread
        for s in cell["steps"] + cell["vs_floor"]:
            v, r = s["verdict"], s["ratio"]
            # the run's Benjamini-Hochberg step decided every comparison with a test
            # (a comparison the data cannot carry is "insufficient data", or "disturbed" when a
            # round stayed disturbed: named, never judged)
            assert v["adjusted"] or v["call"] == "insufficient data" or (
                v["call"] == "disturbed" and lost and "stayed disturbed" in v["text"]), v
            assert s["stop"]["why"] in {"decided", "cap", "rung failed"}, s["stop"]
            assert s["stop"]["text"] in v["text"]
            if v["call"] in {"faster", "slower"}:  # its repeated interval excludes 1
                assert v["p_value"] <= 0.05
                lo, hi = v["interval"]
                assert lo > 1 or hi < 1
                if v["beyond_threshold"]:  # at least the threshold: the interval beyond it
                    assert lo >= 1 + v["threshold"] or hi <= 1 / (1 + v["threshold"])
            else:
                assert "x faster" not in v["text"] and "x slower" not in v["text"]
    prefill = next(c for c in report["cells"]  # a cell none of whose rounds stayed disturbed
                   if c["workload"] == "pp64" and not c["disturbance"]["unresolved"])
    step = next(s for s in prefill["steps"] if s["rung"] == "native_repack")
    assert step["base"] == "floor"
    # ~20x on any x86 host with AVX2 (measured here): called even when the cell's control check
    # failed (its intervals are then widened, never hidden)
    assert step["verdict"]["call"] == "faster", step["verdict"]["text"]
    for cell in report["cells"]:  # every cell says how its control check went
        assert cell["noise_floor"]["control_check"]["passed"] in {True, False}


def test_evidence_no_marker_no_claim(report):
    ev = report["evidence"]["q4_0"]
    floor, native = ev["floor"], ev["native_repack"]
    assert floor["status"] == "ok" and native["status"] == "ok"
    assert "CPU_REPACK" not in floor["weight_buffers_mib"]
    assert floor["compiled_features"].get("AVX2") is None
    assert all(c["credited"] for c in floor["claims"])  # the floor really is generic
    assert native["weight_buffers_mib"]["CPU_REPACK"] > 0
    assert native["compiled_features"]["AVX2"] == "1"
    assert {c["mechanism"]: c["credited"] for c in native["claims"]} == {
        "native_isa": True, "repack": True, "no_amx": True}
    assert native["repacked_layouts"]  # DEBUG lines name the layouts (q4_0_8x8 on AVX2 hosts)


def test_failures_are_reported_and_the_rest_still_measures(report):
    rungs = {r["name"]: r for r in report["rungs"]}
    assert rungs["kleidiai_x86"]["status"] == "build_failed"
    assert "configure failed" in rungs["kleidiai_x86"]["reason"]
    assert Path(rungs["kleidiai_x86"]["log"]).name.endswith(".log")
    if has_amx():
        amx = rungs["amx"]
        # On hosts where AMX is usable this rung measures; where it is not, it must be a
        # reported crash with the signal, never silence.
        assert amx["status"] in {"ok", "crashed"}
        if amx["status"] == "crashed":
            assert "SIG" in amx["reason"]
    else:
        assert rungs["amx"]["status"] == "not_applicable"
    assert rungs["floor"]["status"] == rungs["native_repack"]["status"] == "ok"


def test_quality_drift_against_the_floor(report, run_dir):
    q = report["quality"]["q4_0"]
    # every rung but the control (the same build as its twin); a failed build says so
    # (the AMX rung only where the CPU has AMX: it is not applicable elsewhere)
    assert set(q) == {"floor", "native_repack", "kleidiai_x86"} | ({"amx"} if has_amx() else set())
    assert q["kleidiai_x86"]["status"] == "build_failed"
    floor, native = q["floor"], q["native_repack"]
    assert floor["status"] == "ok" and floor["reference"] and floor["ppl"] > 1
    assert native["status"] == "ok" and native["kld"]["kld_mean"] >= 0
    assert 0 < native["kld"]["same_top_p"] <= 100
    assert native["tokens_scored"] == 4 * 31
    assert native["drift"]["flag"] in {True, False}
    assert "identical_to_floor" in native["probe"]
    if has_amx():
        assert q["amx"]["status"] in {"ok", "crashed"}
    # the base logits are a temporary artifact: gone after a successful run
    assert list((run_dir / HOST / "quality" / "logits").glob("*.kld")) == []
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "## Quality drift against the floor" in md


def test_the_console_shows_progress_and_the_answer(run_dir, report):
    """Issue 14: the plan at the start, a line per step of long jobs, the headline at the end."""
    out = (run_dir / "console.log").read_text()
    if "Nothing to be done" in out:
        pytest.skip("LADDER_E2E_WORKDIR reused a finished run: nothing ran, nothing to show")
    assert re.search(r"^ladder: \d+ jobs planned, \d+ of them measurements \(bench \d+", out, re.M)
    # the rounds a cell planned, warmup included, as the run's own bench file records them
    bench = json.loads(next((run_dir / HOST / "bench").rglob("t*.json")).read_text())
    planned = bench["warmup_rounds"] + bench["rounds"]
    assert re.search(rf"^bench local/gemma3-270m/q4_0/\w+/\d+: round \d+/{planned} · \w+ · "
                     r"[\d.]+ tok/s", out, re.M)
    assert re.search(r"^dispatch local/gemma3-270m/\w+: cell \d+/\d+ · q4_0", out, re.M)
    assert re.search(r"^quality local/gemma3-270m/q4_0/\w+: pass \d/\d", out, re.M)
    # the headline: the ladder table, then one line per ladder step, each cell's A/A figures,
    # and where the report is
    steps = sum(len(c["steps"]) for c in report["cells"])
    assert re.search(r"^render local: ladder: local · gemma3-270m: tokens/s per rung", out, re.M)
    assert re.search(r"^render local: ladder:   Q4_0\s+pp64\s+\d\s+[\d.]+\s+[\d.]+x ▲", out, re.M)
    assert len(re.findall(r"^render local:     \w+ over \w+: ", out, re.M)) == steps
    assert re.search(r"^render local: ladder: local · q4_0 pp64 · \d threads \(A/A \(control vs "
                     r"native_repack\): \|control/twin - 1\|", out, re.M)
    assert "ladder: report: results/hosts/local/report/ladder.html" in out


def test_noop_rerun_runs_nothing(run_dir):
    res = snakemake(run_dir, "-n")
    assert res.returncode == 0
    assert "Nothing to be done" in res.stdout + res.stderr


def test_changing_one_rung_reruns_only_what_includes_it(run_dir, tmp_path):
    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    floor = cfg["ladders"]["x86_64"]["rungs"][0]
    floor["cflags"] = ["-fno-unroll-loops"]  # any change to the floor's binary
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(run_dir, "-n", "--quiet", "rules", config=changed)
    assert res.returncode == 0, res.stderr
    counts = rule_counts(res.stdout)
    assert counts.get("build") == 1  # only the floor; native/amx/control keep their builds
    assert counts.get("evidence") == 1  # only the floor's evidence
    assert counts.get("bench") == 6  # every cell includes the floor (3 workloads x 2 thread counts)
    assert counts.get("reconcile") == 1  # and the reconciliation cell (tg16)
    # the floor's own, and every rung compared with it (AMX only where the CPU has it)
    assert counts.get("quality") == (4 if has_amx() else 3)
    assert counts.get("dispatch") == 1  # only the floor's sweep; the ledger is rebuilt
    assert counts.get("ledger") == 1
    assert "quantize" not in counts  # the quantizer recipe is separate from the floor's
    assert "fetch_model" not in counts and "fetch_source" not in counts


def test_a_cell_reruns_only_for_its_own_settings(run_dir, tmp_path):
    """Issue 32: a job's params hold only its own cell's settings. An added workload measures
    its new cells only; a changed workload re-measures its own cells only; a statistic, the
    report or the serving experiments' settings re-measure no bench cell."""
    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    cfg["measure"]["workloads"]["pp24"] = {"n_prompt": 24, "n_gen": 0}
    cfg["measure"]["workloads"]["tg16"] = {"n_prompt": 0, "n_gen": 12}
    cfg["stats"] = {**(cfg.get("stats") or {}), "threshold": {"prefill": 0.07, "decode": 0.03}}
    cfg["serving"]["load"]["requests"] = 4
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(run_dir, "-n", config=changed)
    assert res.returncode == 0, res.stderr
    benches = re.findall(r"wildcards: host=local, model=gemma3-270m, quant=(\w+), "
                         r"workload=(\w+), threads=(\d+)", res.stdout)
    jobs = list(benches)
    # pp24 (new) and tg16 (changed) at 1 and 2 threads; pp16 and pp64 keep their cells
    assert sorted(w for _, w, _ in jobs) == ["pp24", "pp24", "tg16", "tg16"], jobs
    # the load's own settings changed: its serve job only (not the other experiments')
    serves = re.findall(r"wildcards: host=local, experiment=(\w+), model=gemma3-270m, threads=",
                        res.stdout)
    assert serves == ["load"], serves
    # the reconciliation cell of the changed tg16, none of another workload
    assert re.findall(r"rule reconcile:\n(?:.*\n)*?\s+wildcards: host=local, model=gemma3-270m, "
                      r"quant=(\w+), workload=(\w+)\n", res.stdout) == [("q4_0", "tg16")]
    assert "rule serve_bench:" not in res.stdout and "rule quality:" not in res.stdout


def test_single_rung_target(run_dir):
    res = snakemake(run_dir, f"{HOST}/rungs/native_repack.json")
    assert res.returncode == 0, res.stderr[-3000:]
    card = json.loads((run_dir / HOST / "rungs" / "native_repack.json").read_text())
    assert card["build"]["status"] == "ok"
    assert card["evidence"][0]["weight_buffers_mib"]["CPU_REPACK"] > 0


PATCHES = ROOT / "tests" / "fixtures" / "patches"


def patched_config(tmp_path: Path, marker_patch: Path) -> Path:
    """The e2e config with two more rungs on native_repack's recipe: one patched with a real
    patch that makes the CPU backend list a feature LADDER_PATCHED (tests/fixtures/patches), one
    whose patch does not apply to llama.cpp 0c1e570."""
    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    rungs = cfg["ladders"]["x86_64"]["rungs"]
    native = next(r for r in rungs if r["name"] == "native_repack")
    rungs.append({**native, "name": "native_patched", "label": "native + repack, patched",
                  "patches": [{"path": str(marker_patch)}],
                  "markers": [*native["markers"], {"mechanism": "patched",
                                                   "feature": "LADDER_PATCHED"}]})
    rungs.append({**native, "name": "native_badpatch", "label": "a patch that does not apply",
                  "patches": [{"path": str(PATCHES / "does-not-apply.patch")}]})
    path = tmp_path / "patched.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_a_rung_carries_patches(run_dir, tmp_path):
    """Issue 41: a patched rung is built from its own patched copy of the source (the feature
    its patch adds is in its binary's load log); a patch that does not apply fails that rung by
    name (file and hunk) and the other rung still builds; editing a patch rebuilds that rung
    only. Only the two rungs' cards are asked for: no bench cell is measured."""
    marker = tmp_path / "feature-marker.patch"
    marker.write_text((PATCHES / "feature-marker.patch").read_text())
    cfg = patched_config(tmp_path, marker)
    cards = [f"{HOST}/rungs/native_patched.json", f"{HOST}/rungs/native_badpatch.json"]
    res = run_snakemake(run_dir, *cards, config=cfg)
    assert res.returncode == 0, res.stderr[-4000:]
    good = json.loads((run_dir / cards[0]).read_text())
    sha = hashlib.sha256(marker.read_bytes()).hexdigest()
    assert good["build"]["status"] == "ok"
    ev = good["evidence"][0]
    assert "LADDER_PATCHED = 1" in ev["system_info"]  # the patch is in the binary
    assert {c["mechanism"]: c["credited"] for c in ev["claims"]}["patched"] is True
    bad = json.loads((run_dir / cards[1]).read_text())
    reason = bad["build"]["reason"]
    assert bad["build"]["status"] == "failed" and bad["evidence"][0]["status"] == "build_failed"
    assert "llama.cpp 0c1e570 + 1 patch (does-not-apply, " in reason, reason
    assert ("patch does-not-apply (" in reason and
            "rejected ggml/src/ggml-cpu/ggml-cpu.cpp hunk #1 (at line 629)" in reason), reason
    # the patched build's record names its source: base commit + the patch and its sha256
    prov = json.loads((shared_resources() / "builds" / good["build"]["build_key"] /
                       "provenance.json").read_text())
    assert prov["source"]["label"] == f"llama.cpp 0c1e570 + 1 patch (feature-marker, {sha[:12]})"
    assert prov["source"]["patched_from_commit"].startswith("0c1e570")
    # editing the patch: a new patched source, and that rung's build and evidence only
    marker.write_text(marker.read_text().replace("no CPU has", "no CPU has, edited"))
    res = run_snakemake(run_dir, *cards, "-n", "--quiet", "rules", config=cfg)
    assert res.returncode == 0, res.stderr[-3000:]
    counts = rule_counts(res.stdout)
    assert counts.get("fetch_source") == 1 and counts.get("build") == 1, counts
    assert counts.get("evidence") == 1 and "quantize" not in counts, counts


def test_bisect_finds_the_slow_commit(run_dir, tmp_path):
    """Issue 41, item 5, and issue 61: ``ladder bisect`` over a 6-commit history on the floor's
    recipe, one cell (Q4_0 pp16 at 2 threads): the ends, then the probes, each built (ccache
    compiles only what the commit changed) and measured interleaved with both ends, placed by
    the ladder's own verdicts. The first probe does not build: it is skipped (named) and its
    neighbour tried, as git bisect skip does; the slow commit is still named with its
    interval. Run again, nothing is built or measured: every step is content-addressed, the
    failed build a fact kept."""
    repo = histories.slow_history(tmp_path / "repo")
    shas = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.split()
    rounds = tmp_path / "rounds.yaml"  # a 3x step, called at 4 rounds
    rounds.write_text("measure: {rounds: 4, repetitions: 1, rounds_from_noise: {enabled: false}, "
                      "sequential: {max: 4}}\n")  # decided at the third or fourth look
    argv = [sys.executable, "-m", "ladder.commands.bisect_command", "--repo", str(repo), "--good", "HEAD~5",
            "--bad", "HEAD", "--rung", "floor", "--quant", "Q4_0", "--workload", "pp16",
            "--threads", "2", "-d", str(tmp_path / "work"), "--configfile", str(E2E_CONFIG),
            str(rounds), "--config", f"resources_dir={shared_resources()}"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=2400)
    assert res.returncode == 0, res.stderr[-4000:]
    [found] = (tmp_path / "work" / "bisect").glob("*/bisect.json")
    doc = json.loads(found.read_text())
    # a step whose A/A check failed by chance (each cell's, at 5 %) is measured once more, the
    # first set aside in the trace (seen in CI: its 3x step left 'unjudged' at p 0.0014)
    steps = [s for s in doc["steps"] if not s.get("set_aside")]
    assert [s["label"].removesuffix("-again")[:9] for s in steps] == [
        "ends", "probe-002", "probe-001", "probe-003", "probe-004"]
    # called slower with the whole interval beyond the prefill threshold (5 %)
    assert doc["ends"]["call"] == "slower" and doc["ends"]["hi"] < 1 / 1.05, doc["ends"]
    assert steps[1]["side"].startswith("skipped (not measured: ")
    assert [k["commit"] for k in doc["skipped"]] == [shas[2]]
    assert [s.get("side") for s in steps[2:]] == ["good side", "good side", "bad side"], \
        [s.get("vs_good", {}).get("text") for s in doc["steps"]]
    assert doc["result"] == "step" and doc["first_bad"] == shas[4], doc["text"]
    assert doc["far_side"]["vs_good"]["call"] == "slower"
    assert f"first commit on the far side: {shas[4][:12]}" in res.stdout
    assert "Skipped (1): " in res.stdout and "about 3 probes" in res.stderr
    # each probe's build compiled only what its commit changed; the broken one failed, kept
    builds = {b["build_key"]: b for s in doc["steps"] for b in s["builds"]}
    assert len(builds) == 6
    assert [b["status"] for b in builds.values()].count("failed") == 1
    later = [b for b in builds.values() if b["ccache_hits"]]
    assert len(later) >= 4 and all(b["ccache_misses"] < 30 for b in later), builds
    # again: every step's workflow has nothing to do, the same commit is named
    again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    for step in found.parent.iterdir():
        if step.is_dir():
            assert "Nothing to be done" in (step / "snakemake.log").read_text(), step
    assert json.loads(found.read_text())["first_bad"] == shas[4]


# the floor decodes ~23 tokens/s here (44 ms a token, some 600 graph nodes): 5 µs a node is a
# moderate step of the kind people chase (5-10 %)
MODERATE_SPIN_US = 5


def test_bisect_a_moderate_step_is_found_or_says_what_it_needs(run_dir, tmp_path):
    """Issue 61, item 5: a 3-commit history whose middle commit spins 5 µs after every graph
    node (``histories.spin``: a moderate decode step, the kind real regressions are), on the
    floor's recipe, tg16 at 2 threads, at most 4 rounds a step. The walk either finds the
    commit (its interval from the step that measured it) or says the ends were not resolved,
    with the rounds and the setting that would decide them; it never names a commit it did not
    place, and never calls the ends equivalent."""
    repo = histories.spin_history(tmp_path / "repo", 3, 1, MODERATE_SPIN_US)
    shas = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.split()
    rounds = tmp_path / "rounds.yaml"
    rounds.write_text("measure: {rounds: 4, repetitions: 1, rounds_from_noise: {enabled: false}, "
                      "sequential: {max: 4}}\n")
    argv = [sys.executable, "-m", "ladder.commands.bisect_command", "--repo", str(repo), "--good",
            shas[0], "--bad", shas[-1], "--rung", "floor", "--quant", "Q4_0", "--workload",
            "tg16", "--threads", "2", "-d", str(tmp_path / "work"), "--configfile",
            str(E2E_CONFIG), str(rounds), "--config", f"resources_dir={shared_resources()}"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr[-4000:]
    [found] = (tmp_path / "work" / "bisect").glob("*/bisect.json")
    doc = json.loads(found.read_text())
    ends = doc["ends"]
    # a real but small slowdown, its size swayed by the noise: bad over good 0.93x, 0.95x and
    # 0.99x in three runs here (2026-12-08), and once in CI 1.06x *faster* over the good label
    # (p 0.002, its rounds all slow) with 1.01x over the good build's second label: the ends'
    # call must hold over both labels (``bisect.disagreement``), so never equivalent or faster
    assert ends["call"] not in ("equivalent", "faster"), ends
    assert ends["stop"]["rounds"] <= 4, ends["stop"]
    if doc["result"] == "unresolved":  # the ends left open, or too close to place a probe
        need = doc["needs"]
        assert len([s for s in doc["steps"] if not s.get("set_aside")]) == 1
        assert need["why"] in ("cap", "budget", "futile", "probes", "twin")
        if need["why"] != "probes":
            assert ends["call"] not in ("faster", "slower"), doc["text"]
        if need["why"] != "twin":  # the twin's rounds are its own, not the design's maximum
            assert need["rounds"] is None or need["rounds"] > 4, doc["text"]
        if need["rounds"]:
            assert f"--config {need['config']}" in res.stdout
    elif doc["result"] == "step":
        assert doc["first_bad"] == shas[1] and doc["far_side"]["vs_good"]["call"] == "slower"
    else:  # the probe left unplaced at 4 rounds: the step is one of the two commits after good
        assert doc["result"] == "among skipped", doc["text"]
        assert doc["candidates"] == shas[1:], doc["text"]
    print(f"moderate step: {doc['result']}: {doc['text']}")


def rule_counts(out: str) -> dict[str, int]:
    return {line.split()[0]: int(line.split()[1]) for line in out.splitlines()
            if len(line.split()) == 2 and line.split()[1].isdigit()}


def rung_paths(run_dir: Path, kind: str, rung: str) -> list[str]:
    res = subprocess.run([sys.executable, "-m", "ladder.commands.paths_command", kind, rung,
                          "--configfile", str(E2E_CONFIG),
                          "--config", f"resources_dir={shared_resources()}"],
                         capture_output=True, text=True, cwd=run_dir, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_rerun_one_rung_rebuilds_only_it(run_dir):
    """README "Single-rung reruns" (a)/(b): force the rung's build; only what used it reruns."""
    paths = rung_paths(run_dir, "build", "native_repack")
    assert len(paths) == 1 and paths[0].endswith("/provenance.json")
    res = snakemake(run_dir, "-n", "--quiet", "rules", "--forcerun", *paths)
    assert res.returncode == 0, res.stderr
    counts = rule_counts(res.stdout)
    assert counts.get("build") == 1  # the floor, amx and quantizer builds stay
    assert counts.get("evidence") == 2  # native_repack and its control twin (one binary)
    assert counts.get("bench") == 6  # every cell measures all rungs interleaved
    assert counts.get("quality") == 1 and counts.get("dispatch") == 1
    assert "host_facts" not in counts and "quantize" not in counts


def test_remeasure_one_rung_without_rebuilding(run_dir):
    """README "Single-rung reruns" (c): force the rung's measurements, not its build."""
    paths = rung_paths(run_dir, "measure", "native_repack")
    res = snakemake(run_dir, "-n", "--quiet", "rules", "--forcerun", *paths)
    assert res.returncode == 0, res.stderr
    counts = rule_counts(res.stdout)
    assert "build" not in counts
    assert counts.get("evidence") == 1 and counts.get("quality") == 1
    assert counts.get("dispatch") == 1 and counts.get("bench") == 6
    assert counts.get("reconcile") == 1  # the reconciliation cell measures it too


def test_fleet_report_of_one_host(run_dir):
    fleet = json.loads((run_dir / "results" / "report" / "fleet.json").read_text())
    (host,) = fleet["hosts"]
    assert host["name"] == "local" and host["status"] == "reported"
    assert host["slurm_jobs"] == [] and host["nodes"] == [platform.node()]
    assert {c["workload"] for c in fleet["comparisons"]} == {"pp16", "pp64", "tg16"}
    [rc] = fleet["reconcile"]  # the host's reconciliation cell, its best counts and step
    assert (rc["host"], rc["quant"], rc["workload"]) == ("local", "q4_0", "tg16")
    assert set(rc["best"]) == {"floor", "native_repack"} and rc["steps"][0]["call"] == "faster"
    assert "## Each rung at its own best thread count, per host" in (
        run_dir / "results" / "report" / "fleet.md").read_text()
    assert (run_dir / "results" / "report" / "fleet.html").stat().st_size > 2000


def test_dispatch_ledger(report, run_dir):
    ledger = report["ledger"]
    assert ledger["format"] == "ladder-ledger/1"
    by = {}
    for c in ledger["cells"]:
        by.setdefault(c["rung"], []).append(c)
    assert {c["workload"] for c in by["floor"]} == {"decode_short", "prefill_long"}
    assert {c["threads"] for c in by["floor"]} == {1, os.cpu_count()}
    for c in by["floor"]:
        assert c["verdict"] == "DISPATCHED", c
        assert c["L3"]["families"]["generic"]["dispatch"] > 0
    for c in by["native_repack"]:
        # all layer matmuls repacked (q4_0_8x8), the tied Q8_0 output head generic
        assert c["verdict"] == "HYBRID" and 0.9 < c["share"] < 1.0, c
        assert c["L2"]["advertised"] and c["L2"]["weight_buffers_mib"]["CPU_REPACK"] > 0
        assert any(s.startswith("ggml_gem") for s in c["L3"]["symbols"])
        assert c["cost"]["ratio"] > 0 and c["cost"]["uninstrumented_s"] > 0
    for c in by["kleidiai_x86"]:
        assert c["verdict"] == "UNMEASURED" and "build failed" in c["detail"]
    if has_amx() and "amx" in by:
        crashed = [c for c in by["amx"] if c["verdict"] == "CRASHED"]
        for c in crashed:
            assert "SIG" in c["detail"], c
        for c in by["amx"]:
            if c["phase"] == "decode" and c["verdict"] in ("DISPATCHED", "HYBRID"):
                # ggml's AMX buffer runs AVX512-VNNI kernels for M == 1, never the tiles; the
                # VNNI lambda is inlined by some -march=native targets (no symbol to count)
                v = c["L3"]["families"]["amx"]["variants"]
                res = next(r for r in report["ledger"]["rungs"] if r["rung"] == "amx")
                inlined = res["resolution"]["families"]["amx"]["variants_without_symbols"]
                assert v.get("TILE", 0) == 0, c
                if "VNNI" in inlined:
                    assert "VNNI inlined in this build" in c["detail"], c
                else:
                    assert v.get("VNNI", 0) > 0, c
    assert "control" not in by  # the control is its twin's build
    assert ledger["cost"]["ledger_ratio"] > 0
    # the verdict is carried beside every speedup
    steps = [s for cell in report["cells"] for s in cell["steps"]]
    assert all(s["dispatch"] is not None for s in steps)
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "## Dispatch ledger" in md and re.search(r"Dispatch: (prefill|decode) HYBRID", md)


def test_hotspots_and_kernel_tests(report, run_dir):
    """Where the time went (perf record, cpu-clock) and each rung's kernels alone (ggml's
    test-quantize-*), as the real run shows them."""
    hs = report["hotspots"]
    assert hs["unavailable"] is None and hs["frequency_hz"] > 0
    cells = {(c["rung"], c["phase"]): c for c in hs["cells"]}
    assert {c["threads"] for c in hs["cells"]} == {os.cpu_count()}
    assert {c["workload"] for c in hs["cells"]} == {"pp64", "tg16"}

    def families(c: dict) -> dict:
        return {k: v for k, v in c["groups"].items() if k in ("generic", "repack", "llamafile",
                                                             "tiled", "amx", "repack_generic")}

    for phase in ("prefill", "decode"):
        floor, nr = cells[("floor", phase)], cells[("native_repack", phase)]
        assert floor["status"] == nr["status"] == "ok", (floor, nr)
        fam = families(floor)
        assert max(fam, key=fam.get) == "generic" and "repack" not in fam, floor["groups"]
        fam = families(nr)
        if phase == "prefill":  # the q4_0 layers repacked 8x8: most of the time in repack
            assert max(fam, key=fam.get) == "repack", nr["groups"]
        else:  # one token: the tied Q8_0 output head (262,144 rows, not repacked) stays on
            # the generic vec_dot and holds much of the time, as the real run shows
            assert fam["repack"] > 0.05 and fam["generic"] > 0, nr["groups"]
            head = next(t for t in nr["top"] if t["group"] == "generic")
            assert head["symbol"] == "ggml_vec_dot_q8_0_q8_0", nr["top"]
        assert nr["samples"] > 0 and nr["top"][0]["share"] > 0
        raw = run_dir / HOST / "hotspots" / "gemma3-270m" / "q4_0" / "native_repack.raw"
        assert (raw / f"{phase}.t{os.cpu_count()}.report.txt").stat().st_size > 0
        assert (raw / f"{phase}.t{os.cpu_count()}.perf.data").exists()
    for phase in ("prefill", "decode"):  # a rung that failed to build says so, per cell
        c = cells[("kleidiai_x86", phase)]
        assert c["status"] == "unavailable" and c["reason"].startswith("build failed"), c
    for phase in ("prefill", "decode"):  # the AMX rung: sampled, or its crash named
        c = cells.get(("amx", phase))
        if c and c["status"] != "ok":
            assert c["reason"] and "SIG" in c["reason"], c
    # beside each ledger verdict, its family's share of the sampled time (or why there is none)
    for lc in report["ledger"]["cells"]:
        assert lc["time"]["text"], lc
        if lc["rung"] == "native_repack" and lc["threads"] == os.cpu_count():
            assert lc["time"]["text"].startswith("repack ") and lc["time"]["share"] > 0, lc
        if lc["threads"] == 1:
            assert lc["time"]["text"].startswith("not sampled at 1 thread"), lc

    kt = {r["rung"]: r for r in report["kernel_tests"]["rungs"]}
    for rung in ("floor", "native_repack"):
        assert kt[rung]["fns"]["status"] == "ok" and kt[rung]["fns"]["failed"] == 0, kt[rung]
        assert kt[rung]["types"] == ["q4_0"]
    assert kt["kleidiai_x86"]["fns"]["status"] == "unavailable"

    def vec_dot(rung: str) -> float:
        return next(r["min_cycles"] for r in kt[rung]["perf"]["rows"]
                    if (r["type"], r["op"]) == ("q4_0", "vec_dot_q"))

    assert vec_dot("floor") > vec_dot("native_repack")  # no SIMD vs AVX2 and up
    steps = [s for cell in report["cells"] for s in cell["steps"]]
    assert all(s["kernels"]["text"].startswith(("kernels pass", "kernel tests not run"))
               for s in steps if s.get("kernels"))
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "## Where the time goes" in md and "## Each rung's kernels alone" in md
    assert (run_dir / HOST / "report" / "figures" / "hotspots.png").exists()


def test_uprobe_counts_equal_lldb_counts_on_a_real_build(report, run_dir):
    """The cross-check: the fast method's exact counts equal the debugger's, same symbols."""
    from ladder.measuring import debugger
    from ladder.measuring.dispatch import choose_method, workload_argv
    from ladder.core.kernels import load_families, plan_probes
    from ladder.measuring.uprobes import UprobeSession

    if choose_method("uprobe")[0] is None or choose_method("lldb")[0] is None:
        pytest.skip("needs uprobes (root) and lldb")
    rung = next(r for r in report["ledger"]["rungs"] if r["rung"] == "native_repack")
    lib = Path(rung["resolution"]["library"])
    probes, _ = plan_probes(load_families("x86_64"), lib)
    dispatch = [p for p in probes if p.kind == "dispatch"]
    model = next(m for m in report["provenance"]["models"] if m["quant"].lower() == "q4_0")
    argv = workload_argv(lib.parent, str(run_dir / model["path"]), {"n_gen": 2}, 2, [])
    with UprobeSession(dispatch) as s:
        before = s.snapshot()
        assert subprocess.run(argv, capture_output=True).returncode == 0
        up = s.delta(before)
    res = debugger.run_under_lldb(
        debugger.find_lldb(), argv,
        [{"id": p.id, "module": p.module, "file_addr": p.entry, "mode": "count"} for p in dispatch],
        timeout_s=600)
    assert res["exit"] == 0, res
    assert sum(up.values()) > 0
    assert {k: up[k] for k in res["hits"]} == res["hits"]


def test_report_files_schema_and_roofline(report, run_dir):
    from ladder.reporting.render import validate

    rep = run_dir / HOST / "report"
    validate(report, "ladder.json")
    html = (rep / "ladder.html").read_text()
    assert not re.search(r"""(src|href)=["']https?:""", html)  # standalone: no fetches
    assert html.count("data:image/png;base64,") >= len(report["cells"])
    pngs = sorted(p.name for p in (rep / "figures").glob("*.png"))
    assert "drift_vs_speedup.png" in pngs and "roofline_decode.png" in pngs
    assert any(p.startswith("prefill_") for p in pngs) and any(p.startswith("threads_") for p in pngs)
    assert report["bandwidth"]["bandwidth_gbps"] > 0
    decode = [c for c in report["cells"] if c["workload"] == "tg16"]
    assert decode and all(c["roofline"]["kind"] == "memory bandwidth" for c in decode)
    assert all(0 < pct for c in decode for pct in c["roofline"]["rungs"].values())
    assert report["cost"]["price"]["instance"] == "test-vm"
    floor = decode[0]["rungs"]["floor"]["median"]
    assert decode[0]["cost"]["floor"]["usd_per_mtok"] == pytest.approx(0.10 / (floor * 3600) * 1e6)


def test_html_report_in_headless_chromium(run_dir, tmp_path):
    """Re-render from the results directory (no measuring), open it as a person would."""
    from browser import find_chromium, open_page

    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI (.ci/run installs it)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    out = tmp_path / "rendered"
    res = subprocess.run([sys.executable, "-m", "ladder.commands.render_command", f"{HOST}/report/ladder.json",
                          "--out", str(out)], cwd=run_dir, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    js = """({
      rows: document.querySelectorAll('#headline-table tr').length,
      imgs: Array.from(document.images).map(i => [i.complete, i.naturalWidth]),
      figures: document.querySelectorAll('figure img').length,
      ledger: !!document.querySelector('#ledger-table'),
      text: document.body.innerText.length
    })"""
    shot = tmp_path / "ladder.png"
    page = open_page((out / "ladder.html").as_uri(), js, shot)
    assert page["failed"] == []
    assert all(u.startswith(("file:", "data:", "about:")) for u in page["requests"]), page["requests"]
    v = page["value"]
    assert v["rows"] > 1 and v["figures"] >= 3 and v["ledger"] and v["text"] > 2000
    assert v["imgs"] and all(ok and w > 100 for ok, w in v["imgs"])
    assert shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")


def test_rerender_lists_missing_and_malformed_inputs(report, run_dir, tmp_path):
    from ladder.reporting.render import render_all
    from ladder.reporting.report import write_report

    res = run_dir / HOST
    broken = tmp_path / "broken-evidence.json"
    broken.write_text('{"format": "ladder-evidence/1", "rung": ')
    evidence = sorted(str(p) for p in (res / "evidence").rglob("*.json"))
    bench = sorted(str(p) for p in (res / "bench").rglob("t*.json"))
    host = str(res / "host.json")
    src = report["provenance"]["source"]
    src_file = tmp_path / "source.json"
    src_file.write_text(json.dumps(src))
    out_json = tmp_path / "ladder.json"
    write_report(plan=report["plan"], stats_cfg=report["provenance"]["stats"],
                 inputs={"source": [str(src_file)], "host": [host],
                         "evidence": evidence + [str(broken)],
                         "bench": bench + [str(tmp_path / "gone.json")]},
                 out_json=str(out_json))
    doc = json.loads(out_json.read_text())
    problems = {m["file"] for m in doc["missing"]}
    assert str(broken) in problems and str(tmp_path / "gone.json") in problems
    paths = render_all(out_json, tmp_path / "out", workdir=run_dir)
    html = Path(paths["html"]).read_text()
    top = html[: html.index('id="headline"')]
    assert "Missing or unreadable inputs" in top and "gone.json" in top and "broken-evidence" in top


def test_snakemake_report_zip(run_dir, tmp_path):
    res = snakemake(run_dir, "--report", str(tmp_path / "report.zip"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "report.zip").stat().st_size > 10_000


def test_must_dispatch_gate_fails_the_workflow_and_keeps_the_ledger(run_dir, tmp_path):
    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    cfg["dispatch"]["must_dispatch"] = [
        {"rung": "native_repack", "quant": "q4_0", "workload": "decode_short",
         "accept": ["DISPATCHED"]}]
    gated = tmp_path / "gated.yaml"
    gated.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(run_dir, config=gated)
    assert res.returncode != 0
    assert "native_repack/q4_0/decode_short/t1: HYBRID" in res.stderr + res.stdout
    out = res.stderr + res.stdout
    assert "rule dispatch:" not in out and "rule bench:" not in out  # the gate reruns no sweep
    ledger = json.loads((run_dir / HOST / "dispatch" / "ledger.json").read_text())
    assert not ledger["gate"]["passed"]


def test_each_rung_at_its_own_best_thread_count(report, run_dir):
    """The thread sweep (1 and all threads): each rung at its best count against the floor at
    its best, beside the same-thread verdict, in the JSON and both renderings."""
    groups = report["reconciliation"]
    assert {(g["quant"], g["workload"]) for g in groups} == {
        (c["quant"], c["workload"]) for c in report["cells"]}
    for g in groups:
        assert g["base"] == "floor"
        floor_best = max((c for c in report["cells"] if (c["quant"], c["workload"]) ==
                          (g["quant"], g["workload"])),
                         key=lambda c: c["rungs"]["floor"]["median"])
        assert g["base_threads"] == floor_best["threads"]
        for r in g["rows"]:
            assert "Welch" in r["ratio"]["method"] and r["verdict"]["text"]
            assert r["same_threads"]["threads"] == r["threads"]
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    html = (run_dir / HOST / "report" / "ladder.html").read_text()
    assert "## Each rung at its own best thread count" in md and 'id="best-threads"' in html


def test_thread_reconciliation_pairs_the_counts_in_one_cell(report, run_dir):
    """Issue 57, items 1-2: the reconciliation cell (tg16, every rung at 1 and all threads in
    the same rounds): each comparison across counts is paired (one cell's rounds), each rung's
    best count or tied set, every step at equal threads and best against best, the ledger's
    verdict at the best count, in the JSON and both renderings."""
    rc = report["reconcile"]
    ncpu = os.cpu_count()
    assert rc["counts"] == [1, ncpu]
    [c] = rc["cells"]
    assert (c["quant"], c["workload"], c["phase"]) == ("q4_0", "tg16", "decode")
    doc = json.loads((run_dir / HOST / "reconcile" / "gemma3-270m" / "q4_0" / "tg16.json")
                     .read_text())
    names = {s["rung"] for s in doc["samples"]}
    assert names >= {"floor@t1", f"floor@t{ncpu}", "native_repack@t1",
                     f"native_repack@t{ncpu}", f"control@t{ncpu}"}
    assert {s["n_threads"] for s in doc["samples"] if s["rung"].endswith("@t1")} == {1}
    assert doc["sequential"]["wait_for"] == ["step", "threads"]
    assert [r["rung"] for r in c["rungs"]] == ["floor", "native_repack"]
    for r in c["rungs"]:
        best = r["best"]
        assert best["threads"] and set(best["threads"]) <= {1, ncpu}
        assert best["decided"] == (len(best["threads"]) == 1), r
        for p in best["pairs"]:  # paired: every round had both counts
            assert p["ratio"]["n"] == len({s["round"] for s in doc["samples"]
                                           if not s.get("warmup") and s["rung"] == p["other"]})
    [step] = c["steps"]
    assert (step["base"], step["rung"]) == ("floor", "native_repack")
    assert [p["threads"] for p in step["same_threads"]] == [1, ncpu]
    native = c["rungs"][1]
    bvb = step["best_vs_best"]
    assert bvb["call"] == "faster" and bvb["main"]["threads"] in native["best"]["threads"]
    assert set(native["dispatch"]) == {"1", str(ncpu)} and native["text"].count("dispatch ledger")
    assert c["aa"] and c["aa"]["control"] == f"control@t{ncpu}"
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    html = (run_dir / HOST / "report" / "ladder.html").read_text()
    assert "## Each rung at its own best thread count, paired" in md and 'id="reconcile"' in html
    assert "best against best" in md


def test_serving_levers_in_the_report(report, run_dir):
    srv = report["serving"]
    ctx = {p["point"]: p for p in srv["context"]}
    assert set(ctx) == {"pp16", "pp64"}  # decode at depth: serving.depth's
    for p in srv["context"]:
        rungs = p["cell"]["rungs"]
        assert rungs["floor"]["n"] == 3 and rungs["native_repack"]["median"] > 0
        assert rungs["floor"]["peak_rss_kib"] > 0  # memory per point, to rule pressure in or out
        assert p["cell"]["noise_floor"]["floor"] is not None
        assert all(s["verdict"]["call"] for s in p["cell"]["vs_floor"])
    # the levers: each setting against the lever's baseline on one rung (never the floor)
    levers = srv["kv_cache"] + srv["ubatch"]
    assert "native_repack" in {p["base"] for p in levers}
    assert "floor" not in {p["base"] for p in levers}
    for p in levers:
        rungs = p["cell"]["rungs"]
        if p["base"] != "native_repack":  # the refused KleidiAI build, AMX: a status, no figure
            assert not any(r.get("n") for r in rungs.values())
            assert p["base"] in {u["rung"] for u in srv["unmeasured"]}
            continue
        assert rungs[p["baseline"]]["n"] == 3 and p["cell"]["noise_floor"]["floor"] is not None
        assert {c["base"] for c in p["cell"]["vs_floor"]} == {p["baseline"]}
        assert all(c["verdict"]["call"] for c in p["cell"]["vs_floor"])
        assert all(m["peak_rss_mib"] > 0 for m in p["memory"])
    kv = {p["workload"]: p for p in srv["kv_cache"] if p["base"] == "native_repack"}
    assert set(kv) == {"pp32", "tg4_d32"}
    assert [c["rung"] for c in kv["tg4_d32"]["cell"]["vs_floor"]] == ["q8_0"]
    q8 = next((run_dir / HOST / "serving" / "kv_cache").glob(
        "*/native_repack_tg4_d32/t*.raw/*-q8_0.stderr.log"))
    assert "-ctk q8_0 -ctv q8_0 -fa 1" in q8.read_text().splitlines()[0]
    (ub,) = [p for p in srv["ubatch"] if p["base"] == "native_repack"]
    assert ub["baseline"] == "ub_default" and set(ub["cell"]["rungs"]) == {
        "ub_default", "ub8", "ub32", "ub_default_twin"}
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "every setting is judged against `f16` on that rung" in md
    # the toggle: one binary (native_repack), repack on vs off, at 1 and all threads
    tog = srv["toggle"]
    assert sorted(p["threads"] for p in tog) == sorted({1, os.cpu_count()})
    for p in tog:
        assert set(p["cell"]["rungs"]) >= {"native_repack", "repack_off"}
        (step,) = p["cell"]["steps"]
        assert (step["base"], step["rung"]) == ("native_repack", "repack_off")
    raw = next((run_dir / HOST / "serving" / "toggle").rglob("*repack_off.stderr.log"))
    assert "--repack 0" in raw.read_text().splitlines()[0]


def test_prefix_cache_ttft_from_server_timings(report, run_dir):
    pc = report["serving"]["prefix_cache"]
    by = {c["rung"]: c for c in pc["cache"]}
    assert {"floor", "native_repack", "control"} <= set(by)
    for c in by.values():
        # the warm request reuses the shared prefix: most of the prompt is skipped
        assert c["prefill_skipped"] > 0.5 and min(c["cache_n"]) > 50
        assert c["ttft_warm_ms"]["median"] < c["ttft_cold_ms"]["median"]
    assert pc["levers"].startswith("TTFT on `native_repack`")  # both levers on one rung
    assert "bigger lever on this rung" in pc["levers"] or "cannot tell" in pc["levers"]
    if has_amx():  # the AMX server dies in its first prefill: recorded, not hidden
        assert pc["rung_status"]["amx"]["status"] == "failed"
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "### Prefix cache: time to first token" in md and pc["levers"] in md


def test_long_context_restores_a_context_filled_once(report, run_dir):
    """Issue 58: every rung's prompt and decode after contexts of 0, 32 and 64 tokens; every
    timed request was the prompt after exactly d cached tokens (the server's own counts), each
    context was filled at most once per build (later rounds restore it), and the report says
    each curve's crossover in words."""
    dp = report["serving"]["depth"]
    assert [p["point"] for p in dp["points"]] == [
        f"{w}@d{d}" for d in (0, 32, 64) for w in ("pp8", "tg4")]
    where = run_dir / HOST / "serving" / "depth" / "gemma3-270m"
    raw = json.loads((where / "t2.json").read_text())
    assert {s["rung"] for s in raw["samples"]} >= {"floor", "native_repack", "control"}
    for s in raw["samples"]:
        assert (s["cache_n"], s["prompt_n"], s["predicted_n"]) == (s["depth"], 8, 4), s
        assert (s["restore_ms"] is None) == (s["depth"] == 0)
    filled: dict = {}
    for f in sorted((where / "t2.raw").glob("round*.json")):
        kept = json.loads(f.read_text())
        if kept.get("fill"):
            filled.setdefault(kept["context_key"], []).append(f.name)
        assert (shared_resources() / "contexts" / kept["context_key"] / "d64.bin").is_file()
    assert all(len(v) == 1 for v in filled.values()), filled  # once, then restored
    for phase in ("prefill", "decode"):
        assert {c["crossover"]["kind"] for c in dp["curves"][phase]} <= {
            "between", "none below", "from the start", "not located"}
        assert any(c["rung"] == "native_repack" for c in dp["curves"][phase])
    # where the time goes at d0 and d64, per rung, sampled by perf after the rounds
    hs = dp["hotspots"]
    assert hs["status"] == "ok" and hs["depths"] == [0, 64]
    assert {(r["rung"], r["depth"]) for r in hs["rows"]} >= {
        (n, d) for n in ("floor", "native_repack") for d in (0, 64)}
    for r in hs["rows"]:
        if r["rung"] in ("floor", "native_repack"):
            assert r["status"] == "ok" and r["samples"] > 100 and r["kernels"] > 0.2, r
    assert any(s.startswith("`native_repack`: attention") for s in hs["sentences"])
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "### Long context: prefill and decode after a context of depth d" in md
    assert all(s in md for s in dp["sentences"])
    if has_amx():  # the AMX server dies in its first prefill: recorded, not hidden
        assert dp["rung_status"]["amx"]["status"] in ("failed", "crashed")


def test_concurrency_sweep(report):
    cc = report["serving"]["concurrency"]
    assert [p["parallel"] for p in cc["points"]] == [1, 2]
    for p in cc["points"]:
        assert p["cell"]["rungs"]["native_repack"]["median"] > 0
        assert p["latency_s"]["floor"] > 0


def test_serving_under_load_per_request_records(report, run_dir):
    """A real llama-server per rung: every request kept, its metrics consistent with the
    server's own timings, the pooled percentiles with the records they come from."""
    from ladder.measuring import load_client

    ld = report["serving"]["load"]
    spec = ld["spec"]
    doc = json.loads((run_dir / HOST / "serving" / "load" / "gemma3-270m"
                      / f"t{ld['threads']}.json").read_text())
    measured = {n for n, st in doc["rungs"].items() if st["status"] == "measured"}
    assert {"floor", "native_repack", "control"} <= measured
    assert [lv["level"] for lv in doc["levels_planned"]] == [
        "c1", "c2", "r4", "agent-cache", "agent-nocache", "capacity"]
    for row in ld["table"]:
        p = row["pooled"]
        assert p["requests"] == doc["rounds"] * spec["requests"] == p["completed"], row["rung"]
        assert p["ttft_p50_ms"] <= p["ttft_p90_ms"] <= p["ttft_p99_ms"] <= p["e2el_p99_ms"]
        assert p["server_check"] == {"requests": p["requests"], "tokens_disagree": 0,
                                     "ttft_below_prefill": 0,
                                     "tokens_held_back": p["server_check"]["tokens_held_back"]}
    ok = [r for r in doc["requests"] if r["status"] == "ok"]
    # every request completed but a capacity probe's unsent ones (it could no longer pass)
    unsent = [r for r in doc["requests"] if r["status"] == "not sent"]
    assert len(ok) + len(unsent) == len(doc["requests"])
    assert all(r["level"].startswith("capacity@")
               and r["error"] == "the probe's outcome was decided" for r in unsent)
    for r in ok:  # the client's token count is the server's; TTFT covers its prefill
        # (a token of an incomplete UTF-8 character at n_predict is never streamed)
        assert r["check"]["predicted_n"] == r["output_tokens"] + r["check"]["held_back"] \
            == r["n_predict"]
        assert r["check"]["prompt_n"] + r["check"]["cache_n"] >= r["prompt_tokens"]
        if r["ttft_ms"] is None:  # (the mix's one-token request whose token was held back: no
            # token streamed, no first-token time; seen in CI)
            assert r["output_tokens"] == 0 and r["check"]["held_back"] == r["n_predict"], r
            continue
        assert r["ttft_ms"] + 1 >= r["check"]["prompt_ms"]
    orders: dict[int, set[tuple]] = {}  # the levels' order: fresh per round, one per round
    for rnd in {row["round"] for row in doc["levels"]}:
        for rung in measured:
            orders.setdefault(rnd, set()).add(tuple(r["level"] for r in sorted(
                (r for r in doc["levels"] if (r["round"], r["rung"]) == (rnd, rung)),
                key=lambda r: r["position"])))
    assert all(len(o) == 1 for o in orders.values()), orders
    for row in doc["levels"]:  # each stored summary is what its records give
        if row["kind"] == "capacity":  # its probes' records: every request of every probe
            for key in ("capacity", "concurrency"):
                for i, p in enumerate(row[key]["probes"]):
                    # one attempt's: a disturbed round's set-aside attempt shares rung, round
                    recs = [r for r in doc["requests"]
                            if (r["rung"], r["round"], r["attempt"], r["level"], r.get("probe"))
                            == (row["rung"], row["round"], row["attempt"], p["level"], i)]
                    win = p["window"]
                    # issue 59: a warm-up never judged, then the measured requests
                    assert len(recs) == (win["n_warm"] + win["n"] if p.get("testable", True)
                                         else 0)
                    assert [r["window"] for r in recs] == \
                        ["warmup"] * win["n_warm"] * bool(recs) + ["measured"] * win["n"] * bool(recs)
                    assert sum(load_client.meets(r, spec["limits"]) for r in recs
                               if r["window"] == "measured") == p["good"]
                    assert p["passed"] == (p.get("testable", True) and not p.get("discarded")
                                           and p["judged"]["passed"]), p
            # a later round's searches start at the rung's earlier capacities
            assert (row["capacity"]["hint"] is None) == (row["round"] == 0)
            assert (row["concurrency"]["hint"] is None) == (row["round"] == 0)
            continue
        recs = [r for r in doc["requests"] if (r["rung"], r["round"], r["attempt"], r["level"])
                == (row["rung"], row["round"], row["attempt"], row["level"])]
        assert load_client.summarize(recs, row["duration_s"], spec["limits"]) == row["summary"]
        assert row["cpus_seen"] and row["server_metrics"]["samples"] >= 1
    # issue 43, item 1: each rung's capacity in every round, judged across rounds
    cap = ld["capacity"]
    caps = {r["rung"]: r for r in cap["rungs"]}
    assert {"floor", "native_repack", "control"} <= set(caps)
    for r in caps.values():
        assert len(r["rounds"]) == doc["rounds"]
        assert all(x["capacity_rps"] or x["censored"] == "below" for x in r["rounds"])
    assert caps["native_repack"]["estimate"] >= caps["floor"]["estimate"]
    assert cap["curve"]["floor"] and all(p["ci"] for p in cap["curve"]["floor"])
    assert [c["rung"] for c in cap["cell"]["vs_floor"]][:1] == ["native_repack"]
    # and the most concurrent streams, searched on the same servers
    streams = {r["rung"]: r for r in ld["concurrency_capacity"]["rungs"]}
    assert {"floor", "native_repack", "control"} <= set(streams)
    for r in streams.values():
        assert all(x["capacity_streams"] or x["censored"] == "below" for x in r["rounds"])
    assert streams["native_repack"]["estimate"] >= streams["floor"]["estimate"]
    # the agent's later turns reuse the history with caching on, and never with it off
    later = [r for r in ok if r.get("turn")]
    assert all(r["check"]["cache_n"] > 0 for r in later if r["level"] == "agent-cache")
    assert all(r["check"]["cache_n"] == 0 for r in later if r["level"] == "agent-nocache")
    md = (run_dir / HOST / "report" / "ladder.md").read_text()
    assert "### Serving under load (llama-server)" in md and "goodput req/s" in md
    assert "is read between the two largest of them (in effect the max of" in md
    assert re.search(r"Offered load \(open loop\): `r4` `floor` 4\.00/s named, [\d.]+/s sent, "
                     r"the client's send lag p50 / p99 [\d.]+ / [\d.]+ ms", md), md[-3000:]
    assert re.search(r"Server cross-check \(each request against the server's own `timings`\): "
                     r"\d+ requests checked; 0 with a token count other than", md)
    assert "a round's p99 TTFT ms (95 % CI)" in md
    assert "Success-only percentiles" not in md  # every request completed: the two agree
    assert (run_dir / HOST / "report" / "figures" / "serving_load_closed.png").is_file()
    assert "Offline throughput view: llama-batched-bench" in md
    assert "#### Serving capacity" in md and "so a round's capacity is resolved to 1.41x" in md
    assert (run_dir / HOST / "report" / "figures" / "serving_load_capacity.png").is_file()
    assert "#### Concurrency capacity" in md
    assert (run_dir / HOST / "report" / "figures"
            / "serving_load_concurrency_capacity.png").is_file()


def test_a_server_killed_mid_load_is_named_and_counted(report, run_dir, tmp_path):
    import threading
    import time

    from conftest import measure_block
    from ladder.measuring.harness import Paths
    from ladder.measuring.load import measure_load

    builds = {r["name"]: r["build_key"] for r in report["rungs"]}
    rungs = [{"name": n, "provenance": str(shared_resources() / "builds" / builds[b]
                                           / "provenance.json"),
              "runtime": {}, "env": {}, "common_argv": []}
             for n, b in (("floor", "floor"), ("native_repack", "native_repack"),
                          ("control", "native_repack"))]
    meta = next(m for m in report["provenance"]["models"] if m["quant"].lower() == "q4_0")
    model = tmp_path / "model.json"
    model.write_text(json.dumps({"path": str(run_dir / meta["path"]), "quant": "Q4_0"}))
    raw = tmp_path / "raw"
    stop = threading.Event()

    def killer() -> None:  # after 4 warmup requests (2 waves of 2 slots), a level's 3 and 1
        while not stop.is_set():  # of the next level's
            for log in raw.glob("*-native_repack.server.log"):
                text = log.read_text(errors="replace")
                if text.count("stop processing") >= 8:
                    port = re.search(r"--port (\d+)", text).group(1)
                    subprocess.run(["pkill", "-9", "-f", f"llama-server.*--port {port} "])
                    return
            time.sleep(0.02)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    load = {"n_prompt": 8, "n_gen": 4, "concurrency": [1, 2], "rates": [],
            "requests": 3, "request_timeout_s": 20, "level_max_s": 60,
            "limits": {"ttft_ms": None, "tpot_ms": None, "e2el_ms": None},
            "agent": {"enabled": False}, "server_args": [],
            "metrics_every_s": 0.5, "ready_timeout_s": 60}
    policy = {**{k: v for k, v in measure_block().items() if k in ("disturbance", "cpus")},
              "rounds": 1, "timeout_s": 60, "warmup_rounds": 0, "repetitions": 1,
              "round_statistic": "mean", "warmup": True, "seed": 1}
    try:
        doc = measure_load(rungs, policy, {"load": load},
                           Paths(str(model), str(raw), str(tmp_path / "o.json"),
                                 str(tmp_path / "log")), threads=1)
    finally:
        stop.set()
        t.join(5)
    st = doc["rungs"]["native_repack"]
    # the levels run in the round's own shuffled order: it died in the second one
    died = sorted((r for r in doc["levels"] if r["rung"] == "native_repack"),
                  key=lambda r: r["position"])
    assert [r["position"] for r in died] == [0, 1]
    second = died[1]
    assert st["status"] == "crashed", st
    assert f"llama-server died during level {second['level']}" in st["reason"], st["reason"]
    assert second["summary"]["requests"] == 3  # sent and failed requests stay in the denominators
    assert second["summary"]["failed"] + second["summary"]["timeout"] >= 1
    for other in ("floor", "control"):
        assert doc["rungs"][other]["status"] == "measured"
        assert {r["level"] for r in doc["levels"] if r["rung"] == other} == {"c1", "c2"}
    assert subprocess.run(["pgrep", "-f", "llama-server"], capture_output=True).returncode == 1


def test_no_server_left_running(run_dir):
    res = subprocess.run(["pgrep", "-f", "llama-server"], capture_output=True, text=True)
    assert res.stdout.strip() == "", f"llama-server processes left: {res.stdout}"


def test_server_faults_are_named_and_leave_no_process(report, run_dir, tmp_path):
    import socket

    from ladder.core.errors import LadderError
    from ladder.measuring.llama_server import llama_server

    key = next(r["build_key"] for r in report["rungs"] if r["name"] == "native_repack")
    prov = json.loads((shared_resources() / "builds" / key / "provenance.json").read_text())
    meta = next(m for m in report["provenance"]["models"] if m["quant"].lower() == "q4_0")
    model = {"path": str(run_dir / meta["path"])}  # absolute, or relative to the work dir
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(LadderError, match=f"port {taken} on 127.0.0.1 is already taken"):
            with llama_server(prov["bin_dir"], model["path"], threads=1, ctx=256, port=taken,
                              log=str(tmp_path / "taken.log")):
                pass
    with pytest.raises(LadderError, match="llama-server exited with code 1 before it was ready"):
        with llama_server(prov["bin_dir"], str(tmp_path / "no-such.gguf"), threads=1, ctx=256,
                          log=str(tmp_path / "bad.log")):
            pass
    with pytest.raises(RuntimeError, match="inside"):
        with llama_server(prov["bin_dir"], model["path"], threads=1, ctx=256,
                          log=str(tmp_path / "ok.log")) as srv:
            pid = srv.pid
            raise RuntimeError("a failure inside the measurement")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the server is gone, even though the block failed


def test_serving_rule_with_a_taken_port_fails_by_name(run_dir, tmp_path):
    import socket

    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg["serving"]["prefix_cache"]["port"] = port
        changed = tmp_path / "port.yaml"
        changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
        (target,) = [str(p.relative_to(run_dir)) for p in
                     (run_dir / HOST / "serving" / "prefix_cache" / "gemma3-270m").glob("t*.json")]
        res = snakemake(run_dir, target, "--forcerun", target, config=changed)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"llama-server: port {port} on 127.0.0.1 is already taken" in out
    assert subprocess.run(["pgrep", "-f", "llama-server"], capture_output=True).returncode == 1
