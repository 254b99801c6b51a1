"""The compiler cache that outlives a clone (LADDER_CCACHE_DIR) and CI's table of minutes
(.ci/minutes.py), on synthetic records and a real two-file compile through ccache."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ladder.preparing.build import (
    ccache_counters,
    ccache_delta,
    ccache_env,
    ccache_hits,
    ccache_location,
    ccache_summary,
)

ROOT = Path(__file__).resolve().parents[1]


def minutes():
    spec = importlib.util.spec_from_file_location("ci_minutes", ROOT / ".ci" / "minutes.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_cache_home_moves_the_cache_not_the_build(monkeypatch, tmp_path):
    default = str(tmp_path / "resources" / "ccache" / "cross-aarch64-linux-gnu")
    monkeypatch.delenv("LADDER_CCACHE_DIR", raising=False)
    assert ccache_location(default) == default
    monkeypatch.setenv("LADDER_CCACHE_DIR", str(tmp_path / "home"))
    # the scope (CPU identity) stays; only the home changes
    assert ccache_location(default) == str(tmp_path / "home" / "cross-aarch64-linux-gnu")
    assert ccache_location(None) is None  # build.ccache: false stays off
    env = ccache_env(default, str(tmp_path))
    assert env["CCACHE_DIR"] == str((tmp_path / "home" / "cross-aarch64-linux-gnu").resolve())
    assert (tmp_path / "home" / "cross-aarch64-linux-gnu").is_dir()


def test_ccache_summary_names_the_hit_rate():
    text = ccache_summary({"direct_cache_hit": 240, "preprocessed_cache_hit": 10,
                           "cache_miss": 11, "dir": "/c/x"})
    assert text == "ccache 250 hits / 11 misses (96 % hit) in /c/x"
    assert "no compiles" in ccache_summary({"cache_miss": 0})


def _test_records(module: str, start: float, stop: float) -> list[dict]:
    return [{"nodeid": f"{module}::test_a", "when": "setup", "outcome": "passed",
             "start": start, "stop": stop - 1, "xdist": False},
            {"nodeid": f"{module}::test_a", "when": "call", "outcome": "passed",
             "start": stop - 1, "stop": stop, "xdist": False}]


def test_parts_in_order_with_the_parallel_tests_as_one(tmp_path):
    m = minutes()
    records = [{"phase": "set-up", "start": 0, "stop": 60},
               {"nodeid": "tests/test_stats.py::t", "when": "call", "start": 70, "stop": 71,
                "xdist": True},
               {"session": "not e2e", "start": 60, "stop": 180, "xdist": True},
               *_test_records("tests/test_e2e.py", 300, 900),
               *_test_records("tests/test_ci_template.py", 180, 300)]
    assert m.parts(records) == [("set-up", 60), ("fast tests in parallel (not e2e)", 120),
                                ("tests/test_ci_template.py", 120), ("tests/test_e2e.py", 600)]


def test_each_build_is_credited_to_the_module_that_made_it(tmp_path):
    m = minutes()
    prov = tmp_path / "builds" / "abcdef0123456789" / "provenance.json"
    prov.parent.mkdir(parents=True)
    prov.write_text(json.dumps({
        "format": "ladder-build/1", "build_key": "abcdef0123456789", "status": "ok",
        "configure_wall_s": 12.0, "build_wall_s": 48.0,
        "material": {"arch": "aarch64", "toolchain_file": {"name": "x"},
                     "recipe": {"cmake": {}, "vendor": {"KleidiAI": {}}}},
        "ccache": {"direct_cache_hit": 400, "preprocessed_cache_hit": 0, "cache_miss": 17}}))
    (tmp_path / "builds" / "other.json").write_text("{}")
    os.utime(prov, (500, 500))
    spans = m.module_spans(_test_records("tests/test_emulated_e2e.py", 400, 600))
    [row] = m.builds([tmp_path], spans)
    assert row["module"] == "tests/test_emulated_e2e.py" and row["kind"] == "cross+KleidiAI"
    assert (row["hits"], row["misses"], row["build_s"]) == (400, 17, 48.0)
    table = m.render(_test_records("tests/test_emulated_e2e.py", 400, 600), [row], [])
    assert "| tests/test_emulated_e2e.py | 3.3 |" in table
    assert "| tests/test_emulated_e2e.py | abcdef01 | aarch64 | cross+KleidiAI | ok | 12 | 48 " \
           "| 400 | 17 |" in table

    # a vendor_tests job's build of KleidiAI's test suite is a build of that module too
    rec = tmp_path / "results" / "kernels" / "kleidiai.vendor.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps({
        "format": "ladder-vendor-tests/1", "vendor": "KleidiAI",
        "ran_on": {"arch": "x86_64", "emulated": {"arch": "aarch64"}},
        "build": {"key": "0123456789abcdef", "status": "ok", "configure_wall_s": 3.0,
                  "build_wall_s": 290.0, "ccache": {"direct_cache_hit": 0,
                                                   "preprocessed_cache_hit": 0,
                                                   "cache_miss": 346}}}))
    os.utime(rec, (550, 550))
    rows = m.builds([tmp_path], spans)
    (vendor,) = [r for r in rows if r["kind"] == "KleidiAI tests"]
    assert (vendor["arch"], vendor["misses"], vendor["build_s"]) == ("aarch64", 346, 290.0)
    assert vendor["module"] == "tests/test_emulated_e2e.py"


@pytest.mark.skipif(shutil.which("ccache") is None or shutil.which("cc") is None,
                    reason="ccache or cc missing")
def test_the_cache_table_reads_a_real_cache(tmp_path):
    """Two compiles of one file through a zeroed cache: one miss, then one hit."""
    m = minutes()
    home = tmp_path / "home"
    cache = home / "x86_64-test"
    cache.mkdir(parents=True)
    (tmp_path / "a.c").write_text("int f(int x) { return x * 3; }\n")
    env = {**os.environ, "CCACHE_DIR": str(cache)}
    subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
    for out in ("a1.o", "a2.o"):
        subprocess.run(["ccache", "cc", "-c", "a.c", "-o", out], cwd=tmp_path, env=env,
                       check=True)
    [row] = m.ccache_stats(home)
    assert (row["cache"], row["hits"], row["misses"], row["rate"]) == ("x86_64-test", 1, 1, 0.5)
    assert "| x86_64-test | 1 | 1 | 50 % |" in m.render([], [], [row])


@pytest.mark.skipif(shutil.which("ccache") is None or shutil.which("cc") is None,
                    reason="ccache or cc missing")
def test_two_sources_share_the_objects_of_their_unchanged_files(tmp_path, monkeypatch):
    """Each build mirrors its tree beside its build dir (hard links) and names its own folder
    ccache's base dir: two sources that differ in one file compile only that file again, from
    anywhere (a patched tree, another commit, a bisection's probe)."""
    from ladder.preparing.build import CCACHE_HOME_ENV, build_tree

    monkeypatch.delenv(CCACHE_HOME_ENV, raising=False)  # this test's own, empty cache
    cache = tmp_path / "cache"
    for name, body in (("a", "2"), ("b", "3")):
        src = tmp_path / "sources" / name / "tree"
        (src / ".git").mkdir(parents=True)
        (src / "same.c").write_text('#include "h.h"\nint f(int x) { return x * K; }\n')
        (src / "h.h").write_text("#define K 7\n")
        (src / "differs.c").write_text(f"int g(int x) {{ return x + {body}; }}\n")
    stats = []
    for name in ("a", "b"):
        out = tmp_path / "builds" / name
        tree = build_tree(tmp_path / "sources" / name / "tree", out / "src")
        assert not (tree / ".git").exists() and (tree / "h.h").stat().st_nlink == 2  # linked
        (out / "build").mkdir()
        env = {**os.environ, **ccache_env(str(cache), str(out))}
        subprocess.run(["ccache", "--zero-stats"], env=env, check=True, capture_output=True)
        for f in ("same.c", "differs.c"):
            subprocess.run(["ccache", "cc", "-O2", f"-I{tree}", "-c", str(tree / f), "-o",
                            f"{f}.o"], cwd=out / "build", env=env, check=True)
        stats.append(ccache_hits(ccache_delta({}, ccache_counters(env))))
    assert stats == [(0, 2), (1, 1)], stats
