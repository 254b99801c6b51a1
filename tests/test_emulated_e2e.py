"""The emulated aarch64 lane for real: cross builds, QEMU -cpu max, evidence, dispatch ledger
(QEMU exec log, cross-checked through the gdbstub), drift, and an evidence-only report.

Needs Debian's gcc-aarch64-linux-gnu, qemu-user-static and gdb-multiarch (.ci/run installs
them; LADDER_REQUIRE_EMULATION=1 turns a missing tool into a failure instead of a skip).
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path

import pytest
import yaml
from workflow_runner import kleidiai_archive, kleidiai_overlay, make_workdir, run_snakemake

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "tests" / "configs" / "emulated.yaml"
EMU = Path("results/hosts/emu_max")
TOOLS = ("qemu-aarch64-static", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", "gdb-multiarch")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
if kleidiai_archive() is None:
    MISSING.append("the KleidiAI archive (shared/third_party/kleidiai-v1.24.0-src.tar.gz)")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(bool(MISSING) and os.environ.get("LADDER_REQUIRE_EMULATION") != "1",
                       reason=f"not installed: {', '.join(MISSING)}"),
]
TARGETS = [f"{EMU}/report/ladder.md", f"{EMU}/report/ladder.html"]


@pytest.fixture(scope="module")
def snakemake(run_dir):
    return partial(run_snakemake, config=[CONFIG, run_dir / "config" / "kleidiai.yaml"])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    work = make_workdir(tmp_path_factory, "LADDER_EMULATED_WORKDIR", "emulated")
    # the KleidiAI rung from the shared archive, as a user points it at a local copy
    overlay = kleidiai_overlay(work)
    res = run_snakemake(work, *TARGETS, config=[CONFIG, overlay])
    if res.returncode != 0:
        pytest.fail(f"emulated lane failed:\n{res.stderr[-6000:]}")
    return work


@pytest.fixture(scope="module")
def report(run_dir):
    return json.loads((run_dir / EMU / "report" / "ladder.json").read_text())


def test_facts_are_the_guest_cpus(run_dir):
    facts = json.loads((run_dir / EMU / "host.json").read_text())
    assert facts["arch"] == "aarch64" and facts["emulated"]["cpu"] == "max"
    assert {"asimddp", "i8mm", "sve", "sme"} <= set(facts["cpu_flags"])
    assert not {"avx2", "sse4_2"} & set(facts["cpu_flags"])  # not the x86 carrier's


def test_report_is_evidence_only(report, run_dir):
    assert report["emulated"]["cpu"] == "max"
    assert report["cells"] == [] and not report.get("serving")
    assert report["ladder_order"] == ["floor", "native_repack", "kleidiai"]
    assert report["control"] is None
    md = (run_dir / EMU / "report" / "ladder.md").read_text()
    html = (run_dir / EMU / "report" / "ladder.html").read_text()
    for text in (md, html):
        assert "Evidence only (emulated)" in text
        assert "-march=armv8.2-a+dotprod+i8mm" in text
        assert "tok/s" not in text and "Headline" not in text
    rungs = {r["name"]: r for r in report["rungs"]}
    assert rungs["kleidiai"]["status"] == "not_applicable"
    assert "no KleidiAI source" in rungs["kleidiai"]["reason"]
    cmake = rungs["native_repack"]["recipe"]["cmake"]
    assert cmake["GGML_NATIVE"] == "OFF"
    assert cmake["GGML_CPU_ARM_ARCH"] == "armv8.2-a+dotprod+i8mm"
    assert rungs["native_repack"]["recipe"]["toolchain"] == "aarch64-linux-gnu.cmake"
    assert rungs["floor"]["recipe"]["cmake"]["GGML_CPU_ARM_ARCH"] == "armv8-a"


def test_evidence_under_emulation(report):
    ev = report["evidence"]["q4_0"]
    floor, repack = ev["floor"], ev["native_repack"]
    assert floor["status"] == repack["status"] == "ok"
    assert repack["weight_buffers_mib"].get("CPU_REPACK", 0) > 100
    assert "CPU_REPACK" not in floor["weight_buffers_mib"]
    assert repack["compiled_features"]["DOTPROD"] == "1"
    assert repack["compiled_features"]["MATMUL_INT8"] == "1"
    # compiled features are checked against the guest's HWCAPs, not the x86 host's cpuinfo
    by_feature = {r["feature"]: r for r in repack["features_vs_host"]}
    assert by_feature["MATMUL_INT8"]["host_flag"] == "i8mm" and by_feature["MATMUL_INT8"]["host_has"]
    assert all(c["credited"] for c in repack["claims"])
    assert repack["argv"][0].endswith("qemu-aarch64-static") and "max" in repack["argv"]


def test_ledger_counts_guest_kernels(run_dir):
    ledger = json.loads((run_dir / EMU / "dispatch" / "ledger.json").read_text())
    cells = {(c["rung"], c["workload"], c["threads"]): c for c in ledger["cells"]}
    assert set(cells) == {(r, w, t) for r in ("floor", "native_repack")
                          for w in ("decode_short", "prefill_short") for t in (1, 2)}
    for (rung, workload, threads), c in cells.items():
        assert c["method"] == "qemu-exec"
        fams = c["L3"]["families"]
        if rung == "native_repack":
            assert c["verdict"] == "DISPATCHED", c["detail"]
            assert fams["repack"]["dispatch"] > 0 and fams["repack"]["kernels"] > 0
            assert fams.get("generic", {}).get("dispatch", 0) == 0
            # every guest thread entered the repack kernels
            assert c["L3"]["guest_threads"]["repack"] == list(range(threads))
        else:
            assert c["verdict"] == "DISPATCHED", c["detail"]  # the floor's own family: generic
            assert fams["generic"]["dispatch"] > 0
            assert fams.get("repack", {}).get("dispatch", 0) == 0
        if threads == 1:
            x = c["L3"]["crosscheck"]
            assert x["agree"] is True, x
            assert x["exited_normally"] and x["counts"]
    xc = ledger["crosscheck"]
    assert xc["cells"] == 4 and len(xc["agree"]) == 4 and not xc["disagree"]
    md = (run_dir / EMU / "report" / "ladder.md").read_text()
    assert "Cross-check (gdbstub" in md and "4 of 4 agree" in md
    # one step per thread: dispatch counts per thread agree across thread counts
    d1 = cells[("native_repack", "decode_short", 1)]["L3"]["families"]["repack"]["dispatch"]
    d2 = cells[("native_repack", "decode_short", 2)]["L3"]["families"]["repack"]["dispatch"]
    assert d2 == 2 * d1


def test_quality_drift_under_emulation(report):
    q = report["quality"]["q4_0"]
    assert q["floor"]["status"] == "ok" and q["floor"]["ppl"] > 1
    assert q["native_repack"]["status"] == "ok"
    assert q["native_repack"]["kld"]["kld_mean"] >= 0
    assert q["native_repack"]["drift"]["text"]


def test_fleet_lists_the_emulated_host_as_evidence_only(run_dir):
    from ladder.fleet import build_fleet

    doc = build_fleet([str(run_dir / EMU / "report" / "ladder.json")])
    assert doc["reference"] is None and doc["comparisons"] == []
    (entry,) = doc["evidence_only"]
    assert entry["host"] == "emu_max" and entry["emulated"]["cpu"] == "max"
    rows = {r["rung"]: r for r in entry["rows"]}
    assert rows["native_repack"]["buffers"]["CPU_REPACK"] > 100
    assert any("DISPATCHED" in d for d in rows["native_repack"]["dispatch"])


def test_rerun_is_a_no_op(run_dir):
    res = snakemake(run_dir, *TARGETS, "-n")
    assert res.returncode == 0 and "Nothing to be done" in res.stdout + res.stderr


def _config_with(run_dir: Path, name: str, patch: dict) -> Path:
    cfg = yaml.safe_load(CONFIG.read_text())
    # the same KleidiAI source as the module's run: its results stay valid
    cfg.update(yaml.safe_load((run_dir / "config" / "kleidiai.yaml").read_text()))
    for key, value in patch.items():
        cfg[key] = value
    path = run_dir / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_unknown_cpu_model_is_named_and_other_lanes_intact(run_dir):
    before = (run_dir / EMU / "report" / "ladder.json").stat().st_mtime_ns
    # not in emulation.cpu_models: refused before any job
    cfg = _config_with(run_dir, "bad-cpu.yaml", {"hosts": [
        {"name": "local"}, {"name": "emu_max", "kind": "emulated-aarch64", "cpu": "max"},
        {"name": "emu_bad", "kind": "emulated-aarch64", "cpu": "cortex-x9"}]})
    res = snakemake(run_dir, "results/hosts/emu_bad/host.json", config=cfg)
    assert res.returncode != 0
    assert "host emu_bad: cpu 'cortex-x9' is not in emulation.cpu_models" in res.stderr
    # in cpu_models but unknown to this QEMU: the host's facts job fails, naming it
    em = yaml.safe_load(CONFIG.read_text())["emulation"]
    em["cpu_models"] = {"max": {"march": "armv8.2-a+dotprod+i8mm"},
                        "cortex-x9": {"march": "armv9-a"}}
    cfg = _config_with(run_dir, "bad-cpu2.yaml", {"emulation": em, "hosts": [
        {"name": "local"}, {"name": "emu_max", "kind": "emulated-aarch64", "cpu": "max"},
        {"name": "emu_bad", "kind": "emulated-aarch64", "cpu": "cortex-x9"}]})
    res = snakemake(run_dir, "results/hosts/emu_bad/host.json", *TARGETS, "--keep-going",
                    config=cfg)
    assert res.returncode != 0
    assert "cpu 'cortex-x9' is not a CPU model of" in res.stderr
    assert (run_dir / EMU / "report" / "ladder.json").stat().st_mtime_ns == before


def test_missing_qemu_is_named(run_dir):
    em = yaml.safe_load(CONFIG.read_text())["emulation"]
    em["qemu"] = "qemu-aarch64-missing"
    cfg = _config_with(run_dir, "no-qemu.yaml", {"emulation": em, "hosts": [
        {"name": "local"}, {"name": "emu_n1", "kind": "emulated-aarch64", "cpu": "neoverse-n1"}]})
    res = snakemake(run_dir, "results/hosts/emu_n1/host.json", config=cfg)
    assert res.returncode != 0
    assert "emulation.qemu: 'qemu-aarch64-missing' is not on PATH" in res.stderr
    assert "qemu-user-static" in res.stderr
