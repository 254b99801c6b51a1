"""The fleet path through a real SLURM cluster: two "hosts" (two partitions on this node).

Starts munge + slurmctld + slurmd from Debian's packages (tests/slurm_cluster.py), runs a small
ladder through profiles/slurm (snakemake-executor-plugin-slurm), then checks that the jobs really
went through SLURM, that each host's results have the shape of a local run, that the fleet report
compares the hosts, and that a host whose jobs cannot be scheduled is named while the other
hosts' results are kept. Every snakemake call is bounded by `timeout -k`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import slurm_cluster
from workflow_runner import requires, serving_off

ROOT = Path(__file__).resolve().parents[1]
E2E_CONFIG = ROOT / "tests" / "configs" / "e2e.yaml"
HOSTS = ["hosta", "hostb"]
HOST_CPUS = max(1, (os.cpu_count() or 2) // len(HOSTS))  # the node's cores, split between them

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the e2e config is the x86 ladder"),
    requires("LADDER_REQUIRE_SLURM", slurm_cluster.missing(), "the SLURM fleet test"),
]


def fleet_config(extra_hosts: list[dict] | None = None) -> dict:
    """The e2e config, smaller (floor, native_repack and the control; one thread count)."""
    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    ladder = cfg["ladders"]["x86_64"]
    ladder["rungs"] = [r for r in ladder["rungs"] if r["name"] in ("floor", "native_repack")]
    cfg["measure"]["threads"] = ["all"]
    cfg["measure"]["workloads"]["pp64"] = None
    cfg["dispatch"]["threads"] = ["all"]
    # one tiny dispatch workload: a host's ledger keeps its shape; the sweep itself is tested
    # locally (test_e2e), and this halves the fleet's lldb sweeps (2 rungs x 2 hosts)
    cfg["dispatch"]["workloads"]["prefill_long"] = None  # null drops the default's key
    # the serving levers, hotspots and kernel tests are tested locally (test_e2e); here only
    # the fleet path
    cfg["serving"] = serving_off()
    cfg["hotspots"] = {"enabled": False}
    cfg["reconcile"] = {"enabled": False}  # one thread count per host: tested locally
    cfg["kernel_tests"] = {"enabled": False}
    # Two 1-CPU hosts sharing the node, not two whole-node hosts: their jobs run side by side
    # on the node's 2 cores, as two hosts' jobs do on a real fleet (with --exclusive and all
    # cores each, every job waited for the previous one: 405 s for 25 jobs of 340 s in all)
    cfg["hosts"] = [{"name": h, "executor": "slurm", "arch": "x86_64", "partition": h,
                     "cpus": HOST_CPUS, "mem_mb": 4000, "slurm_extra": ""} for h in HOSTS]
    cfg["hosts"] += extra_hosts or []
    return cfg


def run_slurm(workdir: Path, config: dict, *args: str,
              timeout: int = 3000) -> subprocess.CompletedProcess[str]:
    cfg_file = workdir / f"fleet-{len(config['hosts'])}.yaml"
    cfg_file.write_text(yaml.safe_dump(config, sort_keys=False))
    resources = os.environ.get("LADDER_TEST_RESOURCES", str(ROOT / "resources"))
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir),
            "--profile", str(ROOT / "profiles" / "slurm"), "--configfile", str(cfg_file),
            # its own builds, by design: the test proves they ran inside SLURM jobs (a fleet's
            # nodes build for their CPUs). They compile the sources the e2e module's builds
            # compiled, so the shared compiler cache (LADDER_CCACHE_DIR in CI) makes them cheap;
            # they still configure, compile what missed and link.
            "--config", f"resources_dir={resources}", f"builds_dir={workdir}/results/builds",
            # no slurmdbd here: squeue answers status queries (MinJobAge=300 in the cluster)
            "--slurm-status-command", "squeue",
            "--slurm-init-seconds-before-status-checks", "5", *args]
    # a hung snakemake (e.g. a status query that never answers) is killed, never waited on
    return subprocess.run(["timeout", "-k", "30", str(timeout), *argv], capture_output=True,
                          text=True, cwd=workdir)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with slurm_cluster.cluster(tmp_path_factory.mktemp("slurm"), HOSTS) as c:
        yield c


@pytest.fixture(scope="module")
def fleet_dir(cluster, tmp_path_factory):
    work = tmp_path_factory.mktemp("fleet")
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    res = run_slurm(work, fleet_config())
    (work / "run.stderr.log").write_text(res.stderr)
    if res.returncode != 0:
        pytest.fail(f"fleet run failed (rc {res.returncode}):\n{res.stderr[-6000:]}")
    return work


def test_jobs_went_through_slurm(fleet_dir, cluster):
    logs = fleet_dir / ".snakemake" / "slurm_logs"
    for h in HOSTS:
        facts = json.loads((fleet_dir / f"results/hosts/{h}/host.json").read_text())
        assert facts["scheduler_job"]["job_partition"] == h
        assert facts["hostname"] == cluster["node"]
        job_logs = {p.stem for p in (logs / "rule_host_facts" / h).glob("*.log")}
        assert facts["scheduler_job"]["job_id"] in job_logs
        benches = sorted((fleet_dir / f"results/hosts/{h}/bench").rglob("t*.json"))
        assert benches
        for b in benches:
            brief = json.loads(b.read_text())["host"]
            assert brief["slurm_partition"] == h and brief["slurm_job_id"]
            cell = b.relative_to(fleet_dir / f"results/hosts/{h}/bench").with_suffix("")
            # the plugin's own log for this job: rule_bench/<host>_<model>_..._<threads>/<id>.log
            found = list((logs / "rule_bench").glob(f"*/{brief['slurm_job_id']}.log"))
            assert found, f"no SLURM log for {cell} (job {brief['slurm_job_id']})"
    out = (fleet_dir / "run.stderr.log").read_text()
    assert "has been submitted with SLURM jobid" in out


def test_builds_shared_by_cpu_identity(fleet_dir):
    fleet = json.loads((fleet_dir / "results/report/fleet.json").read_text())
    # both partitions are this node: one CPU identity, so every build is made once and shared
    for b in fleet["builds"]:
        assert b["hosts"] == HOSTS, b
    provs = list((fleet_dir / "results" / "builds").glob("*/provenance.json"))
    assert len(provs) == 2  # floor (= the quantizer's recipe), native_repack (= the control's)
    for p in provs:
        doc = json.loads(p.read_text())
        assert doc["ran_on"]["slurm_job_id"], p  # built inside a SLURM job
        if doc["material"]["recipe"]["cmake"].get("GGML_NATIVE") == "ON":
            assert doc["material"]["native_target"]["resolved"]


def test_host_results_have_the_shape_of_a_local_run(fleet_dir):
    from ladder.reporting.render import validate

    for h in HOSTS:
        base = fleet_dir / f"results/hosts/{h}"
        doc = json.loads((base / "report" / "ladder.json").read_text())
        validate(doc, str(base / "report" / "ladder.json"))  # the schema a local run passes
        assert doc["missing"] == []
        assert doc["plan"]["host"]["name"] == h
        assert {(c["quant"], c["workload"]) for c in doc["cells"]} == {
            ("q4_0", "pp16"), ("q4_0", "tg16")}
        for c in doc["cells"]:
            assert c["noise_floor"]["floor"] is not None  # each host has its own floor
        kinds = sorted(p.name for p in base.iterdir())
        assert kinds == ["bandwidth.json", "bench", "dispatch", "evidence", "host.json",
                         "quality", "report", "rungs"] or kinds == [
            "bandwidth.json", "bench", "dispatch", "evidence", "host.json", "quality", "report"]
        assert (base / "report" / "ladder.html").stat().st_size > 10_000
        assert {r["slurm_partition"] for r in doc["provenance"]["ran_on"]} == {h}


def test_fleet_report_compares_hosts(fleet_dir):
    fleet = json.loads((fleet_dir / "results/report/fleet.json").read_text())
    assert [h["name"] for h in fleet["hosts"]] == HOSTS
    assert all(h["status"] == "reported" and h["slurm_jobs"] for h in fleet["hosts"])
    assert len(fleet["comparisons"]) == 2
    for c in fleet["comparisons"]:
        assert c["hosts"] == HOSTS and not c["metadata_disagree"]
        for row in c["rungs"]:
            assert set(row["hosts"]) == set(HOSTS)
            v = row["vs_ref"]["hostb"]
            assert v["call"] in ("faster", "slower", "equivalent", "inconclusive",
                                 "insufficient data")
            assert v["floor"] is not None
            # one node under two labels: an A/A pair, and the report says so
            assert v["same_identity"] and v["text"].startswith("A/A, same CPU identity")
    assert fleet["drift"]["pairs"] == ["hosta/hostb"] and fleet["drift"]["floor"] is not None
    html = (fleet_dir / "results/report/fleet.html").read_text()
    assert "hosta" in html and "hostb" in html and "vs hosta" in html


def test_failing_host_is_named_and_other_hosts_are_kept(fleet_dir):
    reports = {h: fleet_dir / f"results/hosts/{h}/report/ladder.json" for h in HOSTS}
    before = {h: p.stat().st_mtime_ns for h, p in reports.items()}
    bad = {"name": "hostc", "executor": "slurm", "arch": "x86_64", "partition": "hosta",
           "constraint": "no_such_feature", "cpus": HOST_CPUS}
    res = run_slurm(fleet_dir, fleet_config([bad]), timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "ladder: host hostc: rule host_facts failed" in out, out[-3000:]
    assert "results of the other hosts are kept" in out
    for h, p in reports.items():
        assert p.stat().st_mtime_ns == before[h]  # nothing of the good hosts was redone or lost
    partial = json.loads((fleet_dir / "results/report/fleet-partial.json").read_text())
    status = {h["name"]: h["status"] for h in partial["hosts"]}
    assert status == {"hosta": "reported", "hostb": "reported", "hostc": "missing"}
