"""Content addressing in real use (issue 16): two work directories share one resources dir, a
forced re-fetch in one plans nothing in the other, and a run killed with SIGKILL in the middle
of a bench cell resumes with one command, its finished cells byte-identical.

A small config (floor, native_repack and the control; Q4_0; two tiny cells at one thread; no
quality, dispatch or serving), on the builds and models the other e2e modules left in the
shared resources dir (a cold run builds them first).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from workflow_runner import ROOT, run_snakemake, serving_off, shared_resources

from ladder.commands.unlock_command import main as clear_lock

pytestmark = pytest.mark.e2e
E2E_CONFIG = ROOT / "tests" / "configs" / "e2e.yaml"
BENCH = Path("results/hosts/local/bench")


def small_config(path: Path) -> Path:
    cfg = yaml.safe_load(E2E_CONFIG.read_text())
    ladder = cfg["ladders"]["x86_64"]
    ladder["rungs"] = [r for r in ladder["rungs"] if r["name"] in ("floor", "native_repack")]
    cfg["measure"].update(threads=[1], rounds=3)
    # The hypervisor's steal on this shared machine kind is not always small: through one whole
    # CI run (2026-12-05) it stayed at 6-20 %, every 3-round cell here kept 1-2 rounds after its
    # re-measurements, and the compare below could only say "insufficient data" of a 13x
    # regression. This module tests resuming and the compare gate on effects of 3-13x, which
    # such steal cannot hide; a round disturbed by other processes is still measured again, and
    # the steal rule itself is tested in tests/test_disturbance.py and the e2e module.
    cfg["measure"]["disturbance"] = {**cfg["measure"].get("disturbance", {}), "steal_max": 1.0}
    cfg["measure"]["workloads"].update(pp64=None, pp16={"n_prompt": 16, "n_gen": 0},
                                       tg16={"n_prompt": 0, "n_gen": 16})
    cfg["quality"]["enabled"] = False
    cfg["dispatch"]["enabled"] = False
    cfg["hotspots"] = {"enabled": False}
    cfg["reconcile"] = {"enabled": False}
    cfg["kernel_tests"] = {"enabled": False}
    cfg["report"]["bandwidth_probe"]["enabled"] = False
    cfg["serving"] = serving_off()
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def workdir(tmp_path_factory, name: str) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp(name)
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    return work, small_config(work / "small.yaml")


def _procs() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, process group, command name), from /proc."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        out[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), name)
    return out


def tools_of(pgid: int) -> set[int]:
    """llama.cpp tools started by a run (process group ``pgid``): they run in sessions of their
    own, so a kill of the run's group does not reach them by itself."""
    procs = _procs()
    run = {pid for pid, (_, grp, _) in procs.items() if grp == pgid}
    return {pid for pid, (ppid, _, name) in procs.items()
            if ppid in run and name.startswith("llama-")}


def planned(res: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """Job counts by rule from a dry run's job-stats table ({} when nothing is to be done)."""
    counts: dict[str, int] = {}
    table = False
    for line in res.stdout.splitlines() + res.stderr.splitlines():
        if line.startswith("job ") and "count" in line:
            table = True
            continue
        if table:
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit() and parts[0] != "total":
                counts[parts[0]] = int(parts[1])
            elif parts and parts[0] == "total":
                table = False
    return counts


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """Run the small config, SIGKILL its process group while the second bench cell measures,
    then resume the way `./ladder run` does: clear the stale lock, run again."""
    work, cfg = workdir(tmp_path_factory, "resume")
    argv = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(work),
            "--configfile", str(cfg), "--config", f"resources_dir={shared_resources()}",
            "--cores", "all"]
    proc = subprocess.Popen(argv, cwd=work, stdout=subprocess.DEVNULL,
                            stderr=open(work / "killed.log", "w"), start_new_session=True)
    finished: dict[Path, bytes] = {}
    tools: set[int] = set()
    deadline = time.monotonic() + 1500
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            done = sorted((work / BENCH).rglob("t1.json"))
            started = sorted((work / BENCH).rglob("t1.raw"))
            if done and len(started) > len(done):  # one cell finished, the next one measures
                # the next cell's first llama-bench has run: kill mid-cell
                if any(any(d.glob("round*.json")) for d in started
                       if d.with_suffix(".json") not in done):
                    finished = {p: p.read_bytes() for p in done}
                    tools = tools_of(proc.pid)
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
            time.sleep(0.2)
    finally:
        proc.wait(timeout=60)
    if not finished:
        pytest.fail("the run ended before a second bench cell could be killed:\n"
                    + (work / "killed.log").read_text()[-3000:])
    time.sleep(2)
    orphans = sorted(tools & set(tools_of_any()))
    locked = sorted((work / ".snakemake" / "locks").glob("*.lock"))
    assert clear_lock(["-d", str(work)]) == 0  # what ./ladder run does before snakemake
    res = run_snakemake(work, "--rerun-incomplete", config=cfg)
    if res.returncode != 0:
        pytest.fail(f"the resumed run failed:\n{res.stderr[-6000:]}")
    return work, cfg, finished, locked, orphans


def tools_of_any() -> list[int]:
    return [pid for pid, (_, _, name) in _procs().items() if name.startswith("llama-")]


def test_a_killed_run_resumes_and_keeps_its_finished_cells(killed_and_resumed):
    work, _, finished, locked, orphans = killed_and_resumed
    assert locked, "the SIGKILLed run left no lock behind (nothing to resume from)"
    assert not list((work / ".snakemake" / "locks").glob("*.lock"))
    for path, before in finished.items():
        assert path.read_bytes() == before, f"{path} was re-measured"
    cells = sorted((work / BENCH).rglob("t1.json"))
    assert len(cells) == 2 and len(finished) == 1
    for c in cells:  # every cell complete: all rounds of every rung
        doc = json.loads(c.read_text())
        assert {(s["rung"], s["round"]) for s in doc["samples"]} == {
            (r, n) for r in ("floor", "native_repack", "control") for n in range(4)}
    assert (work / "results/hosts/local/report/ladder.html").exists()
    # no llama-bench of the killed run outlived it (they die with their parent: PDEATHSIG)
    assert orphans == []


def test_two_work_dirs_share_the_resources(killed_and_resumed, tmp_path_factory):
    first, cfg, _, _, _ = killed_and_resumed
    second, cfg2 = workdir(tmp_path_factory, "second")
    # the second directory spells the shared resources dir another way (through a link)
    link = second / "shared-resources"
    link.symlink_to(shared_resources())
    mine = ("--config", f"resources_dir={link}")
    # the second directory measures its own cells, and rebuilds, fetches, quantizes nothing
    plan = planned(run_snakemake(second, "-n", *mine, config=cfg2))
    assert plan.get("bench") == 2 and plan.get("evidence") == 3, plan
    for rule in ("build", "fetch_model", "fetch_source", "quantize"):
        assert rule not in plan, plan
    # a forced re-fetch in the second directory leaves the model file untouched ...
    base = next((link / "models" / "gemma3-270m").glob("*/base.json"))
    record = base.read_bytes()
    meta = json.loads(record)
    before = os.stat(meta["path"]).st_mtime_ns
    res = run_snakemake(second, *mine, "--forcerun", "fetch_model", "--", str(base),
                        config=cfg2)
    assert res.returncode == 0, res.stderr[-3000:]
    assert os.stat(meta["path"]).st_mtime_ns == before
    assert not list(base.parent.glob("*.part"))
    assert base.read_bytes() == record  # the same record, whichever way the dir is spelled
    # ... and the first directory, whose cells used that model, plans nothing at all
    res = run_snakemake(first, "-n", config=cfg)
    assert "Nothing to be done" in res.stdout + res.stderr, planned(res)


@pytest.fixture(scope="module")
def generic_native(tmp_path_factory):
    """Another real run: the same small config, but the native_repack rung built with the
    floor's recipe (its build is the floor's, already there): a regression a gate must catch."""
    work, _ = workdir(tmp_path_factory, "regressed")
    cfg = yaml.safe_load(small_config(work / "base.yaml").read_text())
    rungs = cfg["ladders"]["x86_64"]["rungs"]
    native = next(r for r in rungs if r["name"] == "native_repack")
    native.update(cmake=dict(rungs[0]["cmake"]), cpu_cflags=[])
    changed = work / "regressed.yaml"
    changed.write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = run_snakemake(work, config=changed)
    if res.returncode != 0:
        pytest.fail(f"the regressed run failed:\n{res.stderr[-6000:]}")
    return work


def compare_cli(base: Path, new: Path, out: Path, *gate: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ladder.commands.compare_command", str(base), str(new),
                           "--out", str(out), *gate], capture_output=True, text=True,
                          timeout=120)


def test_compare_gates_a_real_regression(killed_and_resumed, generic_native, tmp_path):
    first = killed_and_resumed[0]
    base = first / "results/hosts/local/report/ladder.json"
    new = generic_native / "results/hosts/local/report/ladder.json"
    res = compare_cli(base, new, tmp_path / "c", "--fail-on", "slower,lost-claim")
    assert res.returncode == 3, res.stdout + res.stderr
    doc = json.loads((tmp_path / "c" / "compare.json").read_text())
    slow = [r for r in doc["rows"] if r["rung"] == "native_repack" and r["call"] == "slower"]
    assert slow, doc["rows"]  # the generic build is several times slower, far beyond any floor
    assert any("repack" in line for line in doc["findings"]["lost-claim"])
    assert "gate failed" in res.stderr and "native_repack" in res.stderr
    assert (tmp_path / "c" / "compare.html").read_text().startswith("<!DOCTYPE html>")
    # the same pair without a gate, and a gate on something that did not happen, pass
    assert compare_cli(base, new, tmp_path / "d").returncode == 0
    assert compare_cli(base, new, tmp_path / "e", "--fail-on", "new-drift").returncode == 0
