"""Vendor-library sources (KleidiAI) as inputs: checked by a job, recorded, and a build that
cannot use its source is reported not applicable with the reason, the rest of the ladder intact.

The archive tests use small archives made here; the real KleidiAI archive
(../shared/third_party/kleidiai-v1.24.0-src.tar.gz) is built and run by the emulated lane
(tests/test_emulated_e2e.py)."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from ladder.preparing.build import build
from ladder.reporting.report import rung_status
from ladder.preparing.vendor import fetch_vendor, tree_sha256, vendor_id


def _archive(tmp_path: Path) -> tuple[Path, str]:
    src = tmp_path / "kleidiai-v9"
    (src / "kai").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(kleidiai)\n")
    (src / "kai" / "k.c").write_text("int k;\n")
    arc = tmp_path / "kleidiai-v9.tar.gz"
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(src, arcname="kleidiai-v9")
    return arc, hashlib.sha256(arc.read_bytes()).hexdigest()


def test_archive_is_checked_and_unpacked(tmp_path):
    arc, sha = _archive(tmp_path)
    spec = {"kind": "archive", "path": str(arc), "sha256": sha}
    out = tmp_path / "r" / "vendor.json"
    rec = fetch_vendor("KleidiAI", spec, out)
    assert rec["status"] == "ok" and rec["vendor_id"] == vendor_id("KleidiAI", spec)
    assert Path(rec["source_dir"], "CMakeLists.txt").is_file()
    assert json.loads(out.read_text())["source_dir"] == rec["source_dir"]
    mtime = Path(rec["source_dir"], "CMakeLists.txt").stat().st_mtime_ns
    assert fetch_vendor("KleidiAI", spec, out)["status"] == "ok"  # same archive: not unpacked again
    assert Path(rec["source_dir"], "CMakeLists.txt").stat().st_mtime_ns == mtime


@pytest.mark.parametrize("case", ["missing", "wrong_sha", "no_cmake"])
def test_unusable_archive_is_a_named_status(tmp_path, case):
    arc, sha = _archive(tmp_path)
    spec = {"kind": "archive", "path": str(arc), "sha256": sha}
    if case == "missing":
        spec["path"] = str(tmp_path / "gone.tar.gz")
        want = f"vendor_sources.KleidiAI.path {tmp_path / 'gone.tar.gz'} does not exist"
    elif case == "wrong_sha":
        spec["sha256"] = "0" * 64
        want = f"vendor_sources.KleidiAI.sha256 pins {'0' * 64}, but {arc} has sha256 {sha}"
    else:
        spec["subdirectory"] = "kai"
        want = "has no CMakeLists.txt (set vendor_sources.KleidiAI.subdirectory"
    rec = fetch_vendor("KleidiAI", spec, tmp_path / "r" / "vendor.json")
    assert rec["status"] == "unavailable" and want in rec["reason"], rec["reason"]


def test_folder_source_by_tree_hash(tmp_path):
    arc, _ = _archive(tmp_path)
    folder = tmp_path / "kleidiai-v9"
    spec = {"kind": "dir", "path": str(folder), "sha256": tree_sha256(folder)}
    rec = fetch_vendor("KleidiAI", spec, tmp_path / "r" / "vendor.json")
    assert rec["status"] == "ok" and rec["source_dir"] == str(folder.resolve())
    (folder / "kai" / "k.c").write_text("int k = 1;\n")  # an edited copy is another source
    rec = fetch_vendor("KleidiAI", spec, tmp_path / "r" / "vendor.json")
    assert rec["status"] == "unavailable" and "tree hash" in rec["reason"]


def test_upstream_reachability_is_a_jobs_record(tmp_path):
    rec = fetch_vendor("KleidiAI", {"kind": "upstream"}, tmp_path / "v.json",
                       reachable=lambda host: False)
    assert rec["status"] == "unavailable"
    assert "github.com is unreachable" in rec["reason"] and "vendor_sources.KleidiAI" in rec["reason"]
    ok = fetch_vendor("KleidiAI", {"kind": "upstream"}, tmp_path / "v2.json",
                      reachable=lambda host: True)
    assert ok["status"] == "ok" and ok["source_dir"] is None


def test_a_build_without_its_source_is_not_applicable(tmp_path):
    """The build records 'not_applicable' with the vendor job's reason (no cmake run), and the
    report calls the rung not applicable, not failed."""
    vendor = tmp_path / "v.json"
    fetch_vendor("KleidiAI", {"kind": "archive", "path": str(tmp_path / "nope.tar.gz"),
                              "sha256": "1" * 64}, vendor)
    source = tmp_path / "source.json"
    source.write_text(json.dumps({"root": str(tmp_path), "source_id": "s"}))
    prov = tmp_path / "b" / "provenance.json"
    recipe = {"cmake": {}, "cflags": [], "targets": ["llama-bench"], "build_type": "Release"}
    rec = build(recipe=recipe, material={}, build_key="k" * 16,
                source_json=str(source), provenance=str(prov), log=str(tmp_path / "b.log"),
                jobs=1, vendor_json=[str(vendor)])
    assert rec["status"] == "not_applicable"
    assert "vendor_sources.KleidiAI.path" in rec["reason"] and "does not exist" in rec["reason"]
    assert not (tmp_path / "b" / "build").exists()
    st = rung_status({"name": "kleidiai"}, json.loads(prov.read_text()), [], [])
    assert st["status"] == "not_applicable" and "does not exist" in st["reason"]
