"""Running the real workflow from a test: one Snakemake call in a work dir, and the work dir."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def shared_resources() -> Path:
    """The resources dir the workflow tests share (downloads, models, builds, ccache)."""
    return Path(os.environ.get("LADDER_TEST_RESOURCES", str(ROOT / "resources")))


KLEIDIAI_SHA256 = "9c131f3aae614c20e9f1243c88ef3b06e73f743fa1a91ae0c03a87d734206f9d"


def kleidiai_archive() -> Path | None:
    """The KleidiAI v1.24.0 source llama.cpp 0c1e570 pins (shared/third_party beside the clone,
    as CI lays it; LADDER_KLEIDIAI_ARCHIVE overrides)."""
    env = os.environ.get("LADDER_KLEIDIAI_ARCHIVE")
    candidates = [Path(env)] if env else [
        p / "shared" / "third_party" / "kleidiai-v1.24.0-src.tar.gz" for p in ROOT.parents]
    return next((c for c in candidates if c.is_file()), None)


def kleidiai_overlay(workdir: Path, archive: Path | None = None,
                     sha256: str = KLEIDIAI_SHA256) -> Path:
    """A config overlay pointing the KleidiAI rung at a local archive (as a user would)."""
    path = workdir / "config" / "kleidiai.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    arc = archive or kleidiai_archive()
    path.write_text("vendor_sources:\n  KleidiAI:\n    kind: archive\n"
                    f"    path: '{arc}'\n    sha256: '{sha256}'\n")
    return path


def serving_off() -> dict[str, dict[str, bool]]:
    """``serving`` with every experiment of the default config off (a new experiment too: a
    small config that forgot one ran the load experiment for 12 min in CI)."""
    default = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["serving"]
    return {k: {"enabled": False} for k, v in default.items()
            if isinstance(v, dict) and "enabled" in v}


def run_snakemake(workdir: Path, *args: str, config: Path | list[Path],
                  timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    """Snakemake on ``config`` (one file, or overlays in order) in ``workdir``, sharing the
    project's resources (sources, models, ccache); ``timeout -k`` kills the whole run if it
    overstays."""
    resources = shared_resources()
    configs = [str(c) for c in (config if isinstance(config, list) else [config])]
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir),
            "--configfile", *configs, "--config", f"resources_dir={resources}",
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


def requires(env: str, missing: list[str] | str | None, what: str) -> "pytest.MarkDecorator":
    """A test module's prerequisites (tools, an archive, a cluster): a skip naming what is
    missing, or, with ``env`` set (CI: ``LADDER_REQUIRE_*=1``), an error at collection naming
    it, before any test of the run (and any workflow) starts."""
    import pytest

    absent = [missing] if isinstance(missing, str) else list(missing or [])
    if absent and os.environ.get(env, "") not in ("", "0"):
        pytest.fail(f"{env} is set but {what} cannot run here: missing "
                    f"{'; '.join(absent)}", pytrace=False)
    return pytest.mark.skipif(bool(absent), reason=f"not installed: {'; '.join(absent)}")
