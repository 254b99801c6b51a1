"""Bad input stops the real workflow before any job runs, with a line naming the fault."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def dry_run(tmp_path: Path, override: dict, env: dict | None = None) -> subprocess.CompletedProcess:
    (tmp_path / "config").mkdir(exist_ok=True)
    shutil.copy(ROOT / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / "keep.json").write_text("{}")  # something "already measured"
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path),
            "--configfile", str(tmp_path / "override.yaml"), "-n", "--cores", "1"]
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
])
def test_bad_config_is_named(tmp_path, override, expected):
    res = dry_run(tmp_path, override)
    assert res.returncode != 0
    assert expected in res.stdout + res.stderr
    assert (tmp_path / "results" / "keep.json").exists()  # nothing already measured is deleted


def test_missing_build_tool_is_named(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # a PATH with python and a compiler but no cmake/ninja
    for tool in ("cc", "c++", "ccache", "git"):
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    res = dry_run(tmp_path, {}, env={"PATH": f"{bindir}:{Path(sys.executable).parent}"})
    assert res.returncode != 0
    assert "missing tools: cmake, ninja not on PATH" in res.stdout + res.stderr
