"""Running the real workflow from a test: one Snakemake call in a work dir, and the work dir."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def shared_resources() -> Path:
    """The resources dir the workflow tests share (downloads, models, builds, ccache)."""
    return Path(os.environ.get("LADDER_TEST_RESOURCES", str(ROOT / "resources")))


def run_snakemake(workdir: Path, *args: str, config: Path,
                  timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    """Snakemake on ``config`` in ``workdir``, sharing the project's resources (sources, models,
    ccache); ``timeout -k`` kills the whole run if it overstays."""
    resources = shared_resources()
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir),
            "--configfile", str(config), "--config", f"resources_dir={resources}",
            "--cores", "all", *args]
    return subprocess.run(["timeout", "-k", "30", str(timeout), *argv], capture_output=True,
                          text=True, cwd=workdir)


def make_workdir(tmp_path_factory, reuse_env: str, name: str) -> Path:
    """A fresh work dir with the default config, or the one ``reuse_env`` names (development:
    only what changed reruns)."""
    reuse = os.environ.get(reuse_env)
    work = Path(reuse) if reuse else tmp_path_factory.mktemp(name)
    (work / "config").mkdir(exist_ok=True)
    shutil.copy(ROOT / "config" / "config.yaml", work / "config" / "config.yaml")
    return work
