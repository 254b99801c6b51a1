"""Bad input stops the real workflow before any job runs, with a line naming the fault."""

from __future__ import annotations

import copy
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ladder.core.errors import LadderError

ROOT = Path(__file__).resolve().parents[1]


def start_up(override: dict) -> None:
    """What the Snakefile runs before any job (ladder.planning.config.start_up), in this process, on
    config.yaml with the override merged as --configfile does (a dry run spawns Snakemake:
    4-13 s each on this machine kind)."""
    from snakemake.utils import update_config

    from ladder.planning.config import start_up as checks

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, copy.deepcopy(override))
    checks(config, ROOT / "workflow" / "schemas" / "config.schema.yaml")


def dry_run(tmp_path: Path, override: dict, env: dict | None = None,
            targets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    (tmp_path / "config").mkdir(exist_ok=True)
    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / "keep.json").write_text("{}")  # something "already measured"
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path),
            "--configfile", str(tmp_path / "override.yaml"), "-n", "--cores", "1", *targets]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=tmp_path)


@pytest.mark.parametrize("override, expected", [
    ({"measure": {"roundz": 3}}, "roundz"),
    ({"source": {"sha256": "123"}}, "123"),
    ({"ladder": "riscv"}, "ladder: 'riscv' is not a key of config.ladders"),
    ({"measure": {"quants": ["Q2_K"]}}, "measure.quants: ['Q2_K'] not produced by any model"),
    ({"ladders": {"x86_64": {"control": {"name": "control", "twin": "nope"}}}},
     "control.twin: 'nope' is not a rung"),
    ({"quality": {"ctx": 64, "chunks": 2}},
     "quality.chunks/quality.ctx: 2 chunks of 64 score 62 tokens; llama-perplexity prints no KL "
     "statistics under 100"),
    ({"cost": {"host_instance": "m9.huge"}}, "cost.host_instance: 'm9.huge' is not in cost.prices"),
    ({"hosts": [{"name": "c7g", "executor": "slurm", "arch": "aarch64", "cpus": 2}]},
     "hosts[0] (c7g): a slurm host needs a partition or a constraint"),
    ({"hosts": [{"name": "c7g", "executor": "slurm", "partition": "c7g", "cpus": 2}]},
     "hosts[0] (c7g).arch: a slurm host must name its arch"),
    ({"hosts": [{"name": "c7g", "executor": "slurm", "arch": "aarch64", "partition": "c7g"}]},
     "hosts[0] (c7g).cpus: a slurm host needs the CPUs its jobs ask for"),
    ({"hosts": [{"name": "a"}, {"name": "a", "executor": "slurm", "arch": "x86_64",
                                "partition": "p", "cpus": 2}]},
     "hosts[1] (a).name: 'a' is listed twice"),
    ({"hosts": [{"name": "c7g", "executor": "slurm", "arch": "aarch64", "partition": "c7g",
                 "cpus": 2, "instance": "c9g.nano"}]},
     "hosts[].instance: 'c9g.nano' is not in cost.prices"),
    ({"hosts": [{"name": "Bad-Name"}]}, "Bad-Name"),
    ({"hotspots": {"workloads": {"prefill": "pp999"}}},
     "hotspots.workloads.prefill: 'pp999' is not a workload of measure.workloads"),
    ({"hotspots": {"workloads": {"decode": "pp128"}}},
     "hotspots.workloads.decode: 'pp128' is a prefill workload"),
    ({"measure": {"repetitions": "auto", "warmup_rounds": 0}},
     "measure.repetitions: auto calibrates from the warmup round"),
    ({"measure": {"repetitions": "auto", "round_statistic": "best"}},
     "measure.round_statistic: 'best' with measure.repetitions auto"),
    ({"measure": {"repetitions": "many"}}, "many"),
    ({"measure": {"rounds_from_noise": {"target": {"prefill": 0.10, "decode": 0.03}}}},
     "measure.rounds_from_noise (pilot 10, min 12, max 28): target 0.03 for decode is not "
     "beyond the threshold 0.03"),
    ({"measure": {"rounds_from_noise": {"pilot": 40}}},
     "measure.rounds_from_noise (pilot 40, min 12, max 28): needs pilot >= 3, min <= max"),
    ({"serving": {"load": {"capacity": {"enabled": True, "start_rps": 32}}}},
     "serving.load.capacity: start_rps must lie between min_rps and max_rps (min_rps 0.125, "
     "start_rps 32, max_rps 16)"),
    ({"serving": {"lever_rungs": ["nativ_repack"]}},
     "serving.lever_rungs: ['nativ_repack'] not rungs of the x86_64 ladder"),
    ({"build": {"targets": ["llama-bench", "llama-completion", "llama-perplexity",
                            "llama-quantize", "llama-server", "llama-batched-bench"]}},
     "kernel_tests needs test-quantize-fns, test-quantize-perf in build.targets"),
])
def test_bad_config_is_named(override, expected):
    """Every start-up check, in process: the Snakefile's own sequence (config.yaml, then the
    override on top as --configfile merges it; the schema; the hosts; check_config). The CLI
    path of each kind of check is tested below through a real Snakemake dry run."""
    with pytest.raises(LadderError) as err:
        start_up(override)
    assert expected in str(err.value)


@pytest.mark.parametrize("override, expected", [
    ({"measure": {"roundz": 3}}, "roundz"),  # the schema
    ({"hosts": [{"name": "a"}, {"name": "a", "executor": "slurm", "arch": "x86_64",
                                "partition": "p", "cpus": 2}]},
     "hosts[1] (a).name: 'a' is listed twice"),  # the hosts
    ({"build": {"targets": ["llama-bench", "llama-completion", "llama-perplexity",
                            "llama-quantize", "llama-server", "llama-batched-bench"]}},
     "kernel_tests needs test-quantize-fns, test-quantize-perf in build.targets"),  # check_config
])
def test_bad_config_is_named_by_the_real_workflow(tmp_path, override, expected):
    res = dry_run(tmp_path, override)
    assert res.returncode != 0
    assert expected in res.stdout + res.stderr
    assert (tmp_path / "results" / "keep.json").exists()  # nothing already measured is deleted


def test_missing_build_tool_is_named(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # a PATH with python, a shell and a compiler but no cmake/ninja (the SLURM executor plugin
    # runs `which sacct` when Snakemake loads it)
    for tool in ("cc", "c++", "ccache", "git", "which", "sh", "bash"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    res = dry_run(tmp_path, {}, env={"PATH": f"{bindir}:{Path(sys.executable).parent}"})
    assert res.returncode != 0
    assert "missing tools: cmake, ninja not on PATH" in res.stdout + res.stderr


def test_unknown_host_in_a_target_is_named(tmp_path):
    res = dry_run(tmp_path, {}, targets=("results/hosts/nohost/report/ladder.json",))
    assert res.returncode != 0
    assert "unknown host 'nohost' (hosts: local)" in res.stdout + res.stderr


def test_slurm_host_needs_the_slurm_profile(tmp_path):
    """A run without the SLURM executor would run a slurm host's jobs here: refused by name."""
    override = {"hosts": [{"name": "c7g", "executor": "slurm", "arch": "aarch64",
                           "partition": "c7g", "cpus": 2}]}
    (tmp_path / "config").mkdir(exist_ok=True)
    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path),
            "--configfile", str(tmp_path / "override.yaml"), "--cores", "1"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode != 0
    assert "host c7g is a slurm host (SLURM partition c7g), but this run uses the local " \
           "executor" in res.stdout + res.stderr
    assert not (tmp_path / "results" / "hosts" / "c7g").exists()  # nothing ran here for it


def test_a_ladder_may_have_any_name(tmp_path):
    """A ladder's kernel families are its host's arch's, whatever the ladder is called
    (measurements/aa.py names its A/A ladder "aa")."""
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    mine = cfg["ladders"][platform.machine()]
    res = dry_run(tmp_path, {"ladder": "mine", "ladders": {"mine": mine}})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
