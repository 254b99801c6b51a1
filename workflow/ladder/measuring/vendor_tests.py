"""A vendor kernel library's own tests of the kernels a rung's llama.cpp uses (issue 45, item 5).

KleidiAI ships a googletest suite that checks every micro-kernel against a reference
implementation, one test binary per kernel family (``test/tests/<family>_test.cpp``). This
module builds, from the very vendor source the rung was built with, the test binaries of the
families holding the micro-kernels the pinned llama.cpp calls (the ``kai_run_matmul_*`` names
in its ``ggml-cpu/kleidiai/kernels.cpp``), runs each whole on the host (an emulated host under
its own emulator and CPU model: the guest's SME2 decides which kernels run and which skip), and
records every test's result from googletest's JSON. A kernel the CPU lacks is skipped by the
suite itself (its cpu_check), so "passed" means the kernel really ran and matched.

The build is made once per vendor source and toolchain (a lock guards a build dir shared by
hosts), through the same compiler cache as the rung's own build.
"""

from __future__ import annotations

import fcntl
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.preparing.build import ccache_counters, ccache_delta, ccache_env, run_stages
from ladder.core.io import atomic_write_json, canonical_hash, read_json
from ladder.core.machine import host_brief
from ladder.preparing.recipes import toolchain_file_path
from ladder.core.run import run

FORMAT = "ladder-vendor-tests/1"
KERNELS_CPP = "ggml/src/ggml-cpu/kleidiai/kernels.cpp"
_UKERNEL = re.compile(r"\bkai_run_(matmul_clamp_\w+?)\b")
# GCC 12 (Debian 12's cross compiler) stops with an internal compiler error in the vectorizer
# on kai_lhs_quant_pack_qai8dxp_bf16_neon.c; KleidiAI's C kernels are intrinsics and assembly,
# so the test build turns the auto-vectorizer off for C (the C++ reference code keeps it)
C_FLAGS = "-fno-tree-vectorize"


def used_ukernels(kernels_cpp: str) -> list[str]:
    """The matmul micro-kernels llama.cpp's KleidiAI glue calls (``kai_run_<name>``)."""
    return sorted(set(_UKERNEL.findall(kernels_cpp)))


def test_targets(vendor_root: Path, ukernels: Sequence[str]) -> tuple[dict[str, list[str]],
                                                                       list[str]]:
    """Each KleidiAI test binary holding a used micro-kernel's family, with those micro-kernels;
    and the micro-kernels no test file covers."""
    targets: dict[str, list[str]] = {}
    untested = []
    for name in ukernels:
        found = sorted(vendor_root.glob(f"kai/ukernels/matmul/*/kai_{name}.c"))
        family = found[0].parent.name if found else None
        if family and (vendor_root / "test" / "tests" / f"{family}_test.cpp").is_file():
            targets.setdefault(f"{family}_test", []).append(name)
        else:
            untested.append(name)
    return targets, untested


def build_key(vendor_identity: Mapping[str, Any], toolchain: Mapping[str, Any] | None,
              targets: Sequence[str]) -> str:
    return canonical_hash({"format": FORMAT, "vendor": dict(vendor_identity),
                           "toolchain": dict(toolchain or {}), "c_flags": C_FLAGS,
                           "targets": sorted(targets)}, 16)


def parse_gtest(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every test of googletest's ``--gtest_output=json`` report: name, result, why skipped
    (the message's text line) and failures."""
    out = []
    for suite in doc.get("testsuites") or []:
        for t in suite.get("testsuite") or []:
            failures = [f.get("failure", "") for f in t.get("failures") or []]
            skipped = [s.get("message", "") for s in t.get("skipped") or []]
            result = ("failed" if failures else "skipped" if t.get("result") == "SKIPPED"
                      else "passed" if t.get("result") == "COMPLETED" else str(t.get("result")))
            why = None
            if skipped:
                lines = [ln for ln in skipped[0].splitlines() if ln.strip()]
                why = lines[-1].strip() if lines else None
            out.append({"name": f"{suite.get('name')}.{t.get('name')}",
                        "param": t.get("value_param"), "result": result, "skip_reason": why,
                        "failures": [f.splitlines()[0] if f else "" for f in failures]})
    return out


def tally(tests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    reasons: dict[str, int] = {}
    for t in tests:
        counts[t["result"]] = counts.get(t["result"], 0) + 1
        if t["result"] == "skipped" and t.get("skip_reason"):
            reasons[t["skip_reason"]] = reasons.get(t["skip_reason"], 0) + 1
    return {**counts, "skip_reasons": reasons}


def per_ukernel(tests: Sequence[Mapping[str, Any]], ukernels: Sequence[str]) -> dict[str, Any]:
    """Results per used micro-kernel: the tests whose name or parameter names it. A binary whose
    test names carry no micro-kernel name (a variant index) is counted for its used kernels
    together, and says so."""
    text = [f"{t['name']} {t.get('param') or ''}" for t in tests]
    named = any("kai_" in x for x in text)
    by: dict[str, Any] = {}
    for u in ukernels:
        mine = [t for t, x in zip(tests, text) if f"kai_{u}" in x]
        if mine:
            by[u] = tally(mine)
        elif not named:
            by[u] = {**tally(tests), "by_binary": True}
        else:
            by[u] = {**tally([]), "note": "no test of the suite names it"}
    return by


def _locked_build(build_dir: Path, stages: list[tuple[str, list[str]]], env: Mapping[str, str],
                  log: str, targets: Sequence[str]) -> dict[str, Any]:
    build_dir.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"status": "failed", "reason": None}
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two hosts' jobs building one dir: one at a time
        run_stages(record, stages, env, log, build_dir, targets)
    return record


def run_suite(*, rung: Mapping[str, Any], provenance: str, resources_dir: str, out_json: str,
              raw_dir: str, log: str, jobs: int, timeout_s: float, shards: int | None = None,
              ccache_dir: str | None) -> dict[str, Any]:
    """Build the test binaries of the micro-kernels the rung's llama.cpp uses from the rung's own
    vendor source, run each whole under the rung's launcher, and write the record."""
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)  # an output even when nothing runs
    prov = read_json(provenance)
    vendor = next((v for v in prov.get("vendor") or [] if v.get("name") == "KleidiAI"), None)
    rec: dict[str, Any] = {"format": FORMAT, "ran_on": host_brief(rung.get("guest")),
                           "rung": rung["name"], "vendor": "KleidiAI", "status": "not_run",
                           "reason": None, "launcher": list(rung.get("launcher") or [])}

    def done(status: str, reason: str | None = None) -> dict[str, Any]:
        rec.update(status=status, reason=reason)
        atomic_write_json(out_json, rec)
        return rec

    if prov.get("status") != "ok":
        return done("not_run", f"the rung's build is {prov.get('status')}: {prov.get('reason')}")
    if not vendor or not vendor.get("source_dir"):
        return done("not_run", "the rung's build used no local KleidiAI source (kind upstream: "
                    "ggml downloaded it at build time, and its tests are not kept)")
    root = Path(vendor["source_dir"])
    src_root = Path((prov.get("source") or {}).get("root") or "")
    kernels = src_root / KERNELS_CPP
    if not kernels.is_file():
        return done("not_run", f"{kernels} not found: this llama.cpp has no KleidiAI glue")
    ukernels = used_ukernels(kernels.read_text(errors="replace"))
    targets, untested = test_targets(root, ukernels)
    rec.update(source_dir=str(root), vendor_identity=vendor.get("identity"),
               ukernels=ukernels, untested=untested,
               targets={t: us for t, us in sorted(targets.items())})
    if not targets:
        return done("not_run", "no KleidiAI test file covers the micro-kernels this llama.cpp "
                    "calls")
    toolchain = (prov.get("material") or {}).get("toolchain_file")
    key = build_key(vendor.get("identity") or {}, toolchain, list(targets))
    build_dir = Path(resources_dir) / "vendor_tests" / "KleidiAI" / key
    configure = ["cmake", "-S", str(root), "-B", str(build_dir), "-G", "Ninja",
                 "-DCMAKE_BUILD_TYPE=Release", "-DKLEIDIAI_BUILD_TESTS=ON",
                 f"-DCMAKE_C_FLAGS={C_FLAGS}"]
    if toolchain:
        configure.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file_path(toolchain['name'])}")
    env = ccache_env(ccache_dir, None)
    if env:
        configure += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    compile_ = ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *sorted(targets)]
    before = ccache_counters(env)
    built = _locked_build(build_dir, [("configure", configure), ("build", compile_)], env, log,
                          sorted(targets))
    after = ccache_counters(env)
    rec["build"] = {"key": key, "dir": str(build_dir), "configure_argv": configure,
                    "build_argv": compile_, "status": built["status"], "reason": built["reason"],
                    "configure_wall_s": built.get("configure_wall_s"),
                    "build_wall_s": built.get("build_wall_s"), "c_flags_note": C_FLAGS_NOTE,
                    "ccache": ccache_delta(before, after) if env else None}
    if built["status"] != "ok":
        return done("build_failed", built["reason"])
    # each binary in ``shards`` googletest shards (default ``jobs``), every shard its own
    # (single-threaded) process
    shards = max(1, int(shards or jobs))
    runs = [(t, i) for t in sorted(targets) for i in range(shards)]

    def one(target: str, i: int) -> tuple[list[str], Any, Path]:
        report = raw / f"{target}.shard{i}.json"
        report.unlink(missing_ok=True)
        argv = [*rec["launcher"], str(build_dir / target), f"--gtest_output=json:{report}"]
        res = run(argv, env={"GTEST_TOTAL_SHARDS": str(shards), "GTEST_SHARD_INDEX": str(i)},
                  timeout_s=timeout_s)
        (raw / f"{target}.shard{i}.log").write_text(res.stdout + res.stderr)
        return argv, res, report

    with ThreadPoolExecutor(max_workers=shards) as pool:
        done_runs = dict(zip(runs, pool.map(lambda r: one(*r), runs)))
    results: dict[str, Any] = {}
    failed_runs = []
    for target in sorted(targets):
        mine = [done_runs[(target, i)] for i in range(shards)]
        entry: dict[str, Any] = {
            "argv": mine[0][0], "shards": shards,
            "wall_s": round(max(r.wall_s for _, r, _ in mine), 2),
            "exit": max((r.returncode for _, r, _ in mine), key=abs),
            "failure": next((r.failure() for _, r, _ in mine if r.failure()), None)}
        if all(report.is_file() for _, _, report in mine):
            tests = [t for _, _, report in mine for t in parse_gtest(read_json(str(report)))]
            entry.update(tally(tests), ukernels=per_ukernel(tests, targets[target]),
                         tests=len(tests))
        else:
            failed_runs.append(f"{target}: {entry['failure'] or 'no googletest report'}")
        results[target] = entry
    rec["results"] = results
    rec["totals"] = {k: sum(int(e.get(k) or 0) for e in results.values())
                     for k in ("tests", "passed", "failed", "skipped")}
    if failed_runs:
        return done("crashed", "; ".join(failed_runs))
    return done("failed" if rec["totals"]["failed"] else "ok")


C_FLAGS_NOTE = ("C built with -fno-tree-vectorize: GCC 12's vectorizer stops with an internal "
                "compiler error on one KleidiAI pack kernel; the kernels are intrinsics and "
                "assembly")


def summary(rec: Mapping[str, Any]) -> str:
    """One line for the report: what passed, per used micro-kernel set."""
    if rec.get("status") in ("not_run", "build_failed", "crashed"):
        return f"{rec.get('status')}: {rec.get('reason')}"
    t = rec.get("totals") or {}
    ran = [u for e in (rec.get("results") or {}).values()
           for u, c in (e.get("ukernels") or {}).items() if c.get("passed")]
    return (f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, "
            f"{t.get('skipped', 0)} skipped of {t.get('tests', 0)} tests; the micro-kernels "
            f"llama.cpp calls that ran and matched: {len(ran)} of {len(rec.get('ukernels') or [])}")
