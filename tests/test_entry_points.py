"""What a user types first (issue 14): `snakemake --cores 1 report` and the default target plan
the whole chain in a fresh work dir, before anything ran; a dry run names hosts it cannot plan."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# every stage of the default run, in dataflow order (serve runs concurrency and load; prefix_cache
# is off by default: the load experiment's agent workload measures prompt caching on every rung)
STAGES = ["fetch_source", "host_facts", "build", "fetch_model", "quantize", "evidence", "bench",
          "fetch_corpus", "quality", "dispatch", "ledger", "bandwidth", "serve_bench",
          "serve", "host_report", "render", "fleet"]


def fresh(tmp_path: Path) -> Path:
    (tmp_path / "config").mkdir()
    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    return tmp_path


def dry(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work),
            "--config", f"resources_dir={work / 'resources'}", "-n", "--cores", "1", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=work,
                          env={**os.environ})


def job_counts(res: subprocess.CompletedProcess[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (res.stdout + res.stderr).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


@pytest.mark.parametrize("target", [("report",), ()], ids=["report", "default target"])
def test_the_first_command_plans_every_stage(tmp_path, target):
    res = dry(fresh(tmp_path), *target)
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res)
    missing = [s for s in STAGES if not counts.get(s)]
    assert not missing, f"the plan lacks {missing}: {counts}"
    assert counts.get("report" if target else "all") == 1


def test_per_host_targets_keep_working(tmp_path):
    res = dry(fresh(tmp_path), "results/hosts/local/report/ladder.html")
    assert res.returncode == 0, res.stderr[-3000:]
    assert job_counts(res).get("render") == 1


def test_a_dry_run_names_the_hosts_it_cannot_plan_yet(tmp_path):
    overlay = tmp_path / "slurm.yaml"
    overlay.write_text("hosts:\n  - {name: local}\n"
                       "  - {name: c7g, executor: slurm, arch: aarch64, partition: c7g, cpus: 4}\n")
    res = dry(fresh(tmp_path), "--configfile", str(overlay))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ladder: host c7g: planned once its host_facts job has read its facts" in res.stderr
    assert "ladder: host local:" not in res.stderr
    assert job_counts(res).get("bench", 0) >= 6  # this machine is planned in full (3 quants x 2)


def test_one_emulated_dispatch_file_alone_plans_in_a_fresh_dir(tmp_path):
    """Its priority function needs the host's plan, which waits for the host_facts checkpoint:
    Snakemake took the pending checkpoint for a non-numeric priority and stopped (found
    2026-12-04 asking for one rung's dispatch file to time it)."""
    res = dry(fresh(tmp_path), "--configfile", str(ROOT / "config" / "emulated.yaml"), "--",
              "results/hosts/emu_max/dispatch/gemma3-270m/floor.json")
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res)
    assert (counts["host_facts"], counts["dispatch"], counts["total"]) == (1, 1, 2), counts


def test_the_shipped_patched_rung_plans_in_a_fresh_dir(tmp_path):
    """config/amx_patched.yaml (README "Patches and versions as rungs"): its patch is found from
    any work dir (in the ladder checkout); the patched copy of the source is one more
    fetch_source job; on a host with AMX its rung is one more build, not applicable elsewhere."""
    res = dry(fresh(tmp_path), "--configfile", str(ROOT / "config" / "config.yaml"),
              str(ROOT / "config" / "amx_patched.yaml"), "--",
              "results/hosts/local/rungs/amx_patched.json")
    assert res.returncode == 0, res.stderr[-3000:]
    counts = job_counts(res)
    flags = Path("/proc/cpuinfo").read_text()
    if " amx_tile" in flags and " amx_int8" in flags:
        # the patched rung and the quantizer (the card asks for its evidence on every quant)
        assert counts["fetch_source"] == 2 and counts["build"] == 2, counts
    else:
        assert "build" not in counts, counts
