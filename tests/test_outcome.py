"""A failure is not a fact about the content (ladder.core.outcome): a failure of the moment is
marked beside the job's outputs and retired before the next run plans, so the job runs again;
a failure the content decides is kept. Real processes (a shell that kills itself), real records
(fetch_vendor, build), and the real workflow (snakemake on a vendor record: a first run without
the archive, then the archive put in place, the same config)."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from workflow_runner import ROOT, run_snakemake

from ladder.core import outcome
from ladder.core.run import run
from ladder.preparing.build import build
from ladder.preparing.vendor import fetch_vendor, vendor_id
from ladder.reporting.report import rung_status


def _archive(tmp_path: Path) -> tuple[Path, str]:
    src = tmp_path / "kleidiai-v9"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(kleidiai)\n")
    arc = tmp_path / "kleidiai-v9.tar.gz"
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(src, arcname="kleidiai-v9")
    return arc, hashlib.sha256(arc.read_bytes()).hexdigest()


@pytest.mark.parametrize("code, timed_out, text, moment", [
    (-9, False, "", "killed by SIGKILL"),
    (-15, False, "", "killed by SIGTERM"),
    (0, True, "", "timed out"),
    (1, False, "cc1plus: out of memory allocating 65536 bytes", "ran out"),
    (1, False, "FAILED: x.o\nKilled signal terminated program cc1plus", "ran out"),
    (1, False, "fatal error: error writing to /tmp/cc.s: No space left on device", "ran out"),
    (-11, False, "", None),   # the binary's own crash: a fact
    (-4, False, "", None),    # SIGILL (an instruction the CPU lacks): a fact
    (1, False, "k.c:3:1: error: expected ';'", None),  # a compile error: a fact
    (1, False, "internal compiler error: Segmentation fault", None),  # gcc 12 on KleidiAI
])
def test_the_environments_failures_are_told_from_the_contents(code, timed_out, text, moment):
    got = outcome.of_exit(code, timed_out, text)
    assert (got is None) if moment is None else (moment in got), got


def test_a_process_killed_from_outside_is_noted_a_crash_is_not():
    with outcome.watch() as seen:
        res = run(["sh", "-c", "kill -KILL $$"])
    assert res.signal_name == "SIGKILL"
    assert [m["reason"] for m in seen] == ["sh: killed by SIGKILL (the OOM killer, or kill -9)"]
    with outcome.watch() as seen:
        res = run(["sh", "-c", "kill -SEGV $$"])
        res2 = run(["sh", "-c", "exit 3"])
    assert res.signal_name == "SIGSEGV" and res2.returncode == 3 and seen == []
    with outcome.watch() as seen:
        res = run(["sleep", "5"], timeout_s=0.2)
    assert res.timed_out and [m["reason"] for m in seen] == ["sleep: timed out"]
    outcome.note("outside a job's watch: nowhere to go")  # no error


def test_marked_outputs_are_retired_whole_and_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rec = Path("res/vendor/KleidiAI/abc/vendor.json")
    rec.parent.mkdir(parents=True)
    rec.write_text('{"status": "unavailable"}\n')
    ok = Path("res/vendor/Other/def/vendor.json")
    ok.parent.mkdir(parents=True)
    ok.write_text('{"status": "ok"}\n')
    outcome.mark([rec, ok.parent], [{"reason": "path missing", "seen_at": "t"}])
    assert outcome.sidecar(rec).is_file() and not outcome.sidecar(ok.parent).exists()
    retired = outcome.retire(["res/vendor/{vendor}/{vendor_id,[0-9a-f]+}/vendor.json"],
                             "logs/rechecked")
    assert [r["output"] for r in retired] == [str(rec)] and retired[0]["reasons"] == ["path missing"]
    assert not rec.exists() and not outcome.sidecar(rec).exists() and ok.is_file()
    kept = Path(retired[0]["moved_to"])
    assert kept.is_relative_to(tmp_path / "logs" / "rechecked") or str(kept).startswith("logs/")
    assert json.loads(kept.read_text()) == {"status": "unavailable"}
    assert outcome.sidecar(kept).is_file()
    assert outcome.retire(["res/vendor/{vendor}/{vendor_id}/vendor.json"], "logs/rechecked") == []
    # a job that ran clean leaves no sidecar of an earlier attempt
    outcome.mark([ok], [{"reason": "x", "seen_at": "t"}])
    outcome.clear([ok])
    assert not outcome.sidecar(ok).exists()


def test_glob_of_an_output_pattern():
    assert outcome.glob_of("r/{a}/{b,[0-9]{16}}/x.json") == "r/*/*/x.json"
    assert outcome.glob_of("/abs/{host}/t{threads}.json") == "/abs/*/t*.json"


def test_the_vendor_records_moments_and_facts(tmp_path):
    arc, sha = _archive(tmp_path)
    missing = {"kind": "archive", "path": str(tmp_path / "later.tar.gz"), "sha256": sha}
    with outcome.watch() as seen:
        rec = fetch_vendor("KleidiAI", missing, tmp_path / "a" / "vendor.json")
    assert rec["status"] == "unavailable" and rec["outcome"] == "moment"
    assert "does not exist" in seen[0]["reason"]
    with outcome.watch() as seen:  # a file that is not the pinned one: of the moment too
        rec = fetch_vendor("KleidiAI", {**missing, "path": str(arc), "sha256": "0" * 64},
                           tmp_path / "b" / "vendor.json")
    assert rec["outcome"] == "moment" and len(seen) == 1
    with outcome.watch() as seen:  # the pinned content has no CMakeLists.txt there: a fact
        rec = fetch_vendor("KleidiAI", {**missing, "path": str(arc), "subdirectory": "none"},
                           tmp_path / "c" / "vendor.json")
    assert rec["status"] == "unavailable" and rec["outcome"] == "fact" and seen == []
    with outcome.watch() as seen:
        rec = fetch_vendor("KleidiAI", {**missing, "path": str(arc)}, tmp_path / "d" / "vendor.json")
    assert rec["status"] == "ok" and rec["outcome"] == "fact" and seen == []


def test_a_build_says_which_failures_it_keeps(tmp_path):
    """A build without its vendor source is of the moment (the report: checked again); a patch
    that does not apply is a fact (the report: kept, with the command that re-tries it)."""
    src = tmp_path / "source.json"
    src.write_text(json.dumps({"source_id": "s", "root": str(tmp_path), "label": "x"}))
    vend = tmp_path / "vendor.json"
    with outcome.watch():
        fetch_vendor("KleidiAI", {"kind": "archive", "path": str(tmp_path / "no.tar.gz"),
                                  "sha256": "1" * 64}, vend)
    prov = build(recipe={}, material={}, build_key="k" * 16, source_json=str(src),
                 provenance=str(tmp_path / "p1.json"), log=str(tmp_path / "b1.log"), jobs=1,
                 vendor_json=[str(vend)])
    assert prov["status"] == "not_applicable" and prov["outcome"] == "moment"
    st = rung_status({"name": "kleidiai"}, prov, [], [])
    assert st["outcome"] == "moment" and "checked again on the next run" in st["kept"]
    src.write_text(json.dumps({"source_id": "s", "root": str(tmp_path), "label": "fix",
                               "status": "failed", "reason": "patch fix.patch does not apply"}))
    prov = build(recipe={}, material={}, build_key="k" * 16, source_json=str(src),
                 provenance=str(tmp_path / "p2.json"), log=str(tmp_path / "b2.log"), jobs=1)
    assert prov["status"] == "failed" and prov["outcome"] == "fact"
    st = rung_status({"name": "patched"}, prov, [], [])
    assert st["outcome"] == "fact" and st["retry"] == \
        "./ladder run --forcerun $(./ladder paths build patched)"
    assert f"kept from {prov['checked_at']}" in st["kept"] and "not re-tried" in st["kept"]


def private_run(tmp_path, monkeypatch, overlay: str) -> tuple[Path, Path, list[Path]]:
    """A work dir with the default config, an overlay, and a resources dir of its own (the
    workflow tests' shared one is left alone): (work dir, resources dir, configs)."""
    work, res_dir = tmp_path / "work", tmp_path / "resources"
    (work / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", work / "config" / "config.yaml")
    (work / "config" / "overlay.yaml").write_text(overlay)
    monkeypatch.setenv("LADDER_TEST_RESOURCES", str(res_dir))
    return work, res_dir, [ROOT / "tests" / "configs" / "e2e.yaml",
                           work / "config" / "overlay.yaml"]


def test_the_workflow_checks_a_missing_archive_again(tmp_path, monkeypatch):
    """The issue's sequence through Snakemake: the vendor record made while the archive is
    missing, the archive put where the config points, the same command again: the record is
    ok, the first one kept in logs/rechecked; a third run does nothing."""
    arc, sha = _archive(tmp_path / "made")
    later = tmp_path / "later" / "kleidiai.tar.gz"
    work, res_dir, configs = private_run(
        tmp_path, monkeypatch, f"vendor_sources:\n  KleidiAI:\n    kind: archive\n"
                               f"    path: '{later}'\n    sha256: '{sha}'\n")
    spec = {"kind": "archive", "path": str(later), "sha256": sha}
    target = res_dir / "vendor" / "KleidiAI" / vendor_id("KleidiAI", spec) / "vendor.json"
    first = run_snakemake(work, str(target), config=configs, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    rec = json.loads(target.read_text())
    assert rec["status"] == "unavailable" and rec["outcome"] == "moment"
    assert outcome.sidecar(target).is_file()
    later.parent.mkdir(parents=True)
    later.write_bytes(arc.read_bytes())
    second = run_snakemake(work, str(target), config=configs, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "checking again (a failure of the moment" in second.stderr
    rec = json.loads(target.read_text())
    assert rec["status"] == "ok" and rec["outcome"] == "fact", rec
    assert not outcome.sidecar(target).exists()
    (kept,) = (work / "logs" / "rechecked").rglob("vendor.json")
    assert "does not exist" in json.loads(kept.read_text())["reason"]
    third = run_snakemake(work, str(target), "-n", config=configs, timeout=300)
    assert third.returncode == 0 and "Nothing to be done" in third.stdout + third.stderr


def test_the_workflow_fetches_a_model_that_failed_once(tmp_path, monkeypatch):
    """A model fetch that failed (its file not there yet) records nothing under the model's
    identity: the job fails naming the path, and the same command after the file is put in
    place fetches it."""
    from test_model import tiny_gguf

    made = tmp_path / "made" / "tiny.gguf"
    made.parent.mkdir()
    sha = tiny_gguf(made)
    later = tmp_path / "later" / "tiny.gguf"
    work, res_dir, configs = private_run(
        tmp_path, monkeypatch, f"models:\n  tiny:\n    kind: path\n    path: '{later}'\n"
                               f"    sha256: '{sha}'\n    quant: Q8_0\n")
    target = res_dir / "models" / "tiny" / sha[:16] / "base.json"
    first = run_snakemake(work, str(target), config=configs, timeout=300)
    assert first.returncode != 0 and f"models.tiny.path: {later} does not exist" in first.stderr
    assert not target.exists() and not outcome.sidecar(target).exists()
    later.parent.mkdir(parents=True)
    shutil.copy(made, later)
    second = run_snakemake(work, str(target), config=configs, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(target.read_text())["sha256"] == sha


def test_a_source_fetch_that_failed_once_leaves_no_record(tmp_path):
    """A git source whose repository is not there yet: the fetch names the failure and writes
    nothing under the source's identity; the same fetch once it is there records the source."""
    import subprocess

    from ladder.core.errors import LadderError
    from ladder.preparing import source

    made = tmp_path / "made"
    made.mkdir()
    (made / "CMakeLists.txt").write_text("project(llama)\n")
    for argv in (["init", "-q"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        subprocess.run(["git", *argv], cwd=made, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=made, check=True,
                          capture_output=True, text=True).stdout.strip()
    later = tmp_path / "later"
    cfg = {"kind": "git", "url": str(later), "commit": head}
    out = tmp_path / "sources" / source.source_id(cfg) / "source.json"
    with outcome.watch() as seen, pytest.raises(LadderError, match="source: git"):
        source.fetch(cfg, out.parent, tmp_path / "downloads", out)
    assert not out.exists() and seen == []  # a job that fails keeps no output at all
    made.rename(later)
    source.fetch(cfg, out.parent, tmp_path / "downloads", out)
    assert json.loads(out.read_text())["upstream_commit"] == head


def test_the_report_says_which_measuring_failures_are_kept():
    build = {"status": "ok", "log": "b.log"}
    cell = {"quant": "q4_0", "workload": "pp64", "threads": 2, "workload_spec":
            {"n_prompt": 64, "n_gen": 0}, "rung_status": {"amx": {
                "status": "crashed", "reason": "SIGILL in tinygemm_kernel_amx", "raw": "r"}}}
    st = rung_status({"name": "amx"}, build, [], [cell])
    assert st["outcome"] == "fact" and st["retry"] == \
        "./ladder run --forcerun $(./ladder paths measure amx)"
    cell["rung_status"]["amx"]["reason"] = "killed by SIGKILL"
    st = rung_status({"name": "amx"}, build, [], [cell])
    assert st["outcome"] == "moment" and "measured again on the next run" in st["kept"]
    assert outcome.of_reason("timed out after 600 s") and not outcome.of_reason("SIGSEGV")


def test_a_job_that_read_a_moment_is_one_too(tmp_path):
    """Snakemake never re-makes a missing input of a job whose outputs exist, so a job that read
    a marked output marks its own (the adapter: ``derived``), and the chain is retired whole."""
    rec, other = tmp_path / "vendor.json", tmp_path / "source.json"
    rec.write_text("{}")
    other.write_text("{}")
    outcome.mark([rec], [{"reason": "path missing", "seen_at": "t"}])
    got = outcome.derived([rec, other, tmp_path / "absent.json"])
    assert len(got) == 1 and got[0]["reason"] == f"read {rec}, a failure of the moment (path missing)"
