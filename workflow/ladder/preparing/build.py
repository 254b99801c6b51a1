"""Configure and build one recipe with cmake; a failed build is recorded, not raised."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import outcome, progress
from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, read_json
from ladder.preparing.vendor import check_records
from ladder.core.machine import host_brief
from ladder.core.machine import compiler_identity, host_arch, native_target
from ladder.preparing.recipes import GGML_CPU_FLAGS_CMAKE, toolchain_file_path

FORMAT = "ladder-build/1"


def required_tools(generator: str, use_ccache: bool) -> list[str]:
    tools = ["cmake", os.environ.get("CC", "cc"), os.environ.get("CXX", "c++")]
    if generator == "Ninja":
        tools.append("ninja")
    if use_ccache:
        tools.append("ccache")
    return tools


def missing_tools(generator: str, use_ccache: bool) -> list[str]:
    return [t for t in required_tools(generator, use_ccache) if shutil.which(t) is None]


def cmake_configure_argv(
    source_root: str, build_dir: str, recipe: Mapping[str, Any], generator: str,
    use_ccache: bool, build_commit: str | None,
) -> list[str]:
    argv = ["cmake", "-S", source_root, "-B", build_dir, "-G", generator,
            f"-DCMAKE_BUILD_TYPE={recipe['build_type']}"]
    if recipe.get("toolchain"):
        argv.append(f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file_path(recipe['toolchain'])}")
    for key, value in sorted(recipe["cmake"].items()):
        argv.append(f"-D{key}={value}")
    if recipe["cflags"]:
        flags = " ".join(recipe["cflags"])
        argv += [f"-DCMAKE_C_FLAGS={flags}", f"-DCMAKE_CXX_FLAGS={flags}"]
    if recipe.get("cpu_cflags"):
        argv += [f"-DCMAKE_PROJECT_ggml_INCLUDE={GGML_CPU_FLAGS_CMAKE}",
                 f"-DLADDER_GGML_CPU_FLAGS={' '.join(recipe['cpu_cflags'])}"]
    if use_ccache:
        argv += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache",
                 "-DGGML_CCACHE=OFF"]
    if build_commit:
        # A tree without .git reports "unknown"; pin what llama-bench's JSON says: the verified
        # commit, else the source's label ("src" + its id: never mistaken for a commit)
        argv += [f"-DLLAMA_BUILD_COMMIT={build_commit[:12]}", "-DLLAMA_BUILD_NUMBER=0"]
    return argv


def ccache_counters(env: Mapping[str, str]) -> dict[str, int]:
    """ccache's counters (``--print-stats``) for the cache ``env`` names; {} without ccache."""
    if shutil.which("ccache") is None:
        return {}
    res = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True,
                         env={**os.environ, **env}, check=False)
    stats: dict[str, int] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            stats[key] = int(value)
    return stats


def ccache_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What one build did to the cache: hits and misses between two ``ccache_counters``."""
    return {k: after.get(k, 0) - before.get(k, 0)
            for k in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")}


def ccache_hits(stats: Mapping[str, Any]) -> tuple[int, int]:
    """(hits, misses) of ccache counters: direct and preprocessed hits together."""
    return (int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0)),
            int(stats.get("cache_miss", 0)))


def ccache_summary(stats: Mapping[str, Any]) -> str:
    """``ccache 250 hits / 11 misses (96 % hit) in DIR`` for one build's deltas."""
    hits, misses = ccache_hits(stats)
    rate = f"{100 * hits / (hits + misses):.0f} % hit" if hits + misses else "no compiles"
    return f"ccache {hits} hits / {misses} misses ({rate}) in {stats.get('dir')}"


def _failure_reason(log_text: str, stage: str) -> str:
    for pat in (r"CMake Error.*?\n(?:.*\n){0,3}", r"^.*\berror\b:.*$", r"^FAILED: .*$"):
        m = re.search(pat, log_text, re.M)
        if m:
            return f"{stage} failed: " + " ".join(m.group(0).split())[:500]
    tail = [ln for ln in log_text.splitlines() if ln.strip()][-1:] or ["(no output)"]
    return f"{stage} failed: {tail[0][:300]}"


ARCH_LINES = re.compile(
    r"^-- (?:Adding CPU backend variant.*|x86 detected|ARM detected.*|ARM feature .*|"
    r"Using KleidiAI.*|.*GGML_[A-Z0-9_]+ .*|Including CPU backend|ladder: .*)$", re.M
)


def check_build_host(material: Mapping[str, Any], build_key: str) -> None:
    """A build runs where it is keyed: same arch, compiler and -march=native expansion.

    A cross build (toolchain file) runs on any machine with the same cross compiler."""
    if material.get("toolchain_file"):
        from ladder.preparing.emulation import cross_compiler_identity

        have = cross_compiler_identity()
        if material.get("compiler") != have:
            raise LadderError(f"build {build_key} is keyed for cross compiler "
                              f"{material.get('compiler')} but {socket.gethostname()} has {have}")
        return
    here = {"arch": host_arch(), "compiler": compiler_identity()}
    for what in ("arch", "compiler"):
        if material.get(what) is not None and material[what] != here[what]:
            raise LadderError(f"build {build_key} is keyed for {what} {material[what]} but runs "
                              f"on {socket.gethostname()} with {here[what]}: the job reached "
                              "another kind of node (check the host's partition/constraint)")
    want = material.get("native_target")
    if want and want.get("fingerprint") != native_target()["fingerprint"]:
        raise LadderError(f"build {build_key} is a native build keyed for -march/-mcpu=native = "
                          f"{want.get('resolved')} but {socket.gethostname()} expands it to "
                          f"{native_target()['resolved']}: its jobs reached another CPU model "
                          "(pin the host to one instance type)")


_STEP = re.compile(r"^\[(\d+)/(\d+)\] ")


def _stream(argv: list[str], env: Mapping[str, str], log_f: Any) -> int:
    """Run ``argv`` with its output copied line by line into ``log_f``; a ninja/make step
    counter (``[12/261]``) becomes a progress line at every tenth of the build."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env),
                            text=True, errors="replace", bufsize=1)
    shown = -1
    assert proc.stdout is not None
    for line in proc.stdout:
        log_f.write(line)
        m = _STEP.match(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            tenth = done * 10 // max(total, 1)
            if tenth > shown:
                shown = tenth
                progress.step("compile step", done, total)
    return proc.wait()


CCACHE_HOME_ENV = "LADDER_CCACHE_DIR"


def ccache_location(ccache_dir: str | None) -> str | None:
    """Where a build's compiler cache lives: ``ccache_dir`` (``<resources_dir>/ccache/<scope>``),
    or the same scope under ``$LADDER_CCACHE_DIR`` when that is set, a cache that outlives the
    work tree (CI's, which starts from a fresh clone). The place is no part of a build's
    identity: moving the cache rebuilds nothing."""
    home = os.environ.get(CCACHE_HOME_ENV)
    if ccache_dir is None or not home:
        return ccache_dir
    return str(Path(home) / Path(ccache_dir).name)


def ccache_env(ccache_dir: str | None, ccache_basedir: str | None) -> dict[str, str]:
    """The compiler cache's environment (none without a cache dir)."""
    ccache_dir = ccache_location(ccache_dir)
    if ccache_dir is None:
        return {}
    Path(ccache_dir).mkdir(parents=True, exist_ok=True)
    env = {"CCACHE_DIR": str(Path(ccache_dir).resolve()), "CCACHE_NOHASHDIR": "1"}
    if ccache_basedir:
        env["CCACHE_BASEDIR"] = str(Path(ccache_basedir).resolve())
    return env


def run_stages(record: dict[str, Any], stages: Sequence[tuple[str, list[str]]],
               env: Mapping[str, str], log: str, bin_dir: Path, targets: Sequence[str]) -> None:
    """Configure, then compile, streamed into ``log``; the first failing stage's reason, or
    status ok with the bin dir once every target exists."""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as log_f:
        for stage, argv in stages:
            log_f.write(f"$ {' '.join(argv)}\n")
            log_f.flush()
            t0 = time.monotonic()
            start = log_f.tell()
            # Streamed into the log (tail -f follows a long build); compile steps also reach
            # the terminal, a line per tenth of the build.
            returncode = _stream(argv, {**os.environ, **env}, log_f)
            record[f"{stage}_wall_s"] = round(time.monotonic() - t0, 2)
            log_f.flush()
            with open(log, errors="replace") as back:
                back.seek(start)
                output = back.read()
            if stage == "configure":
                record["configure_arch_lines"] = ARCH_LINES.findall(output)
            if returncode != 0:
                record["reason"] = _failure_reason(output, stage)
                # the machine's failure (killed, out of memory or disk) is checked again next
                # run; the recipe's own (a compile error) is a fact, kept under the build key
                outside = outcome.of_exit(returncode, False, output)
                record["outcome"] = "moment" if outside else "fact"
                if outside:
                    outcome.note(f"build {stage}: {outside}")
                    record["reason"] += f" ({outside}: checked again on the next run)"
                return
    absent = [t for t in targets if not (bin_dir / t).exists()]
    if absent:
        record["reason"] = f"build finished but {', '.join(absent)} missing in {bin_dir}"
    else:
        record["status"] = "ok"
        record["bin_dir"] = str(bin_dir.resolve())


def _unbuilt(provenance: str, log: str, status: str, reason: str, **fields: Any
             ) -> dict[str, Any]:
    """The provenance of a build that was not made: its status and reason, in its log too."""
    record = {"format": FORMAT, **fields, "status": status, "reason": reason, "log": str(log),
              "ran_on": host_brief(), "checked_at": outcome.now()}
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(f"not built: {reason}\n")
    atomic_write_json(provenance, record)
    return record


def build_tree(root: Path, dest: Path) -> Path:
    """``root`` mirrored at ``dest`` by hard links (a copy across file systems); an existing
    mirror is replaced (a source is immutable: its id names its content)."""
    if dest.exists():
        shutil.rmtree(dest)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(root, dest, symlinks=True, copy_function=link,
                    ignore=shutil.ignore_patterns(".git"))
    return dest


def build(
    *, recipe: Mapping[str, Any], material: Mapping[str, Any], build_key: str, source_json: str,
    provenance: str, log: str, jobs: int, generator: str = "Ninja", ccache_dir: str | None = None,
    ccache_basedir: str | None = None, vendor_json: Sequence[str] = (),
) -> dict[str, Any]:
    """Build ``recipe``; always writes ``provenance`` with status 'ok', 'failed' or
    'not_applicable' (a vendor source its vendor_source job found unusable) and a reason."""
    check_build_host(material, build_key)
    src = read_json(source_json)
    vendor_defines, unusable, vendor_records = check_records(list(vendor_json))
    vendor_info = [{k: r.get(k) for k in ("name", "kind", "identity", "status", "reason",
                                          "source_dir", "sha256_found", "outcome")}
                   for r in vendor_records]
    source_info = {k: src.get(k) for k in ("source_id", "upstream_commit", "label", "root",
                                           "patched_from_commit") if k in src}
    if src.get("status") == "failed":  # a rung's patch that does not apply: named, not built
        reason = f"source {src.get('label')}: {src.get('reason')}"
        return _unbuilt(provenance, log, "failed", reason, build_key=build_key,
                        material=dict(material), source=source_info, vendor=vendor_info,
                        outcome="fact")
    if unusable:  # of the moment when a vendor source was (its record goes, this one with it)
        moment = any(v.get("outcome") == "moment" for v in vendor_info)
        return _unbuilt(provenance, log, "not_applicable", unusable, build_key=build_key,
                        material=dict(material), vendor=vendor_info,
                        outcome="moment" if moment else "fact")
    # the real path: cmake bakes the build dir into every binary's RUNPATH, and a build in a
    # shared resources_dir must run from every work dir, whatever link it was reached through
    out_dir = Path(provenance).resolve().parent
    build_dir = out_dir / "build"
    use_ccache = ccache_dir is not None
    missing = missing_tools(generator, use_ccache)
    if missing:
        raise LadderError(f"build tools missing on PATH: {', '.join(missing)} "
                          "(apt-get install cmake ninja-build g++ ccache)")
    # the tree beside its build dir (hard links: no copy): the compiler then sees the same
    # relative paths (../src/...) in every build, so ccache (base dir: this build's folder)
    # reuses each object whose file is unchanged across sources: a patched tree, another
    # commit, a bisection's probe compile only what differs
    tree = build_tree(Path(src["root"]), out_dir / "src") if use_ccache else Path(src["root"])
    env = ccache_env(ccache_dir, str(out_dir) if use_ccache else ccache_basedir)
    configure = cmake_configure_argv(str(tree), str(build_dir), recipe, generator, use_ccache,
                                     src.get("build_label") or src.get("upstream_commit"))
    # a local vendor copy (checked by its job) instead of ggml's download
    configure += [f"-D{k}={v}" for k, v in sorted(vendor_defines.items())]
    compile_ = ["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *recipe["targets"]]
    record: dict[str, Any] = {
        "format": FORMAT, "build_key": build_key, "material": dict(material),
        "source": source_info,
        "configure_argv": configure, "build_argv": compile_, "jobs": jobs,
        "log": str(log), "status": "failed", "reason": None, "ran_on": host_brief(),
        "checked_at": outcome.now(), "vendor": vendor_info,
    }
    before = ccache_counters(env)
    run_stages(record, [("configure", configure), ("build", compile_)], env, log,
               build_dir / "bin", recipe["targets"])
    after = ccache_counters(env)
    if before or after:
        record["ccache"] = ccache_delta(before, after)
        record["ccache"]["dir"] = env.get("CCACHE_DIR")
        with open(log, "a") as log_f:
            log_f.write(f"ladder: {ccache_summary(record['ccache'])}\n")
    atomic_write_json(provenance, record)
    return record
