"""The emulated aarch64 lane: cross-built rungs run under QEMU user mode with a named CPU model.

QEMU's user-mode emulator runs real aarch64 llama.cpp builds on any x86 machine, and llama.cpp
then makes the kernel choices it makes on that CPU (it reads the guest's HWCAPs). This lane gives
*evidence only*: weight buffers, init lines, dispatch verdicts and quality drift. Emulated
throughput says nothing about any real CPU and is never reported as a measurement.

- Facts come from the emulated CPU: a tiny probe, cross-compiled and run under the same
  ``qemu -cpu <model>``, reads ``getauxval(AT_HWCAP/AT_HWCAP2)`` and the SVE/SME vector lengths.
  (``/proc/cpuinfo`` inside qemu-user is the x86 host's.)
- "native" means nothing when cross-compiling: a native rung becomes ``GGML_NATIVE=OFF`` with an
  explicit ``GGML_CPU_ARM_ARCH`` (the CPU model's ``march`` in ``emulation.cpu_models``).
- Dispatch: uprobes cannot see guest code. QEMU's own execution log (``-d exec,nochain`` with
  ``-dfilter`` on the entry addresses of symbols) names each translated block QEMU enters, per
  vCPU, so entries at a symbol's address are its calls, on every guest thread. Exec logging
  slows with every filter range (3x with 19, 9x with 85 here; KleidiAI's 26: 4.6-5.8x), so the
  plain run first logs which symbols were translated at all (``-d in_asm``: checked once per
  translation, no measurable cost), and only those are counted. A rung's single-phase cells
  of one quant share one llama-bench process (``-p 16 -n 2 -t 1,2``): the model is loaded and
  the binary translated once, and the exec log is cut at each test's context
  (``llama_init_from_model``); the gdbstub cross-check counts per test the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ladder.core import outcome
from ladder.core.errors import LadderError
from ladder.core.io import canonical_hash

KIND = "emulated-aarch64"
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
TOOLCHAIN_FILE = PACKAGE_ROOT / "cmake" / "aarch64-linux-gnu.cmake"
PROBE_SOURCE = PACKAGE_ROOT / "emulation" / "hwcap_probe.c"
CROSS_PREFIX = "aarch64-linux-gnu-"
APT_HINT = ("apt-get install -y gcc-aarch64-linux-gnu g++-aarch64-linux-gnu "
            "qemu-user-static")

# Linux arch/arm64/include/uapi/asm/hwcap.h: bit -> the name /proc/cpuinfo 'Features' shows.
HWCAP_BITS = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
              "jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat "
              "ilrcpc flagm ssbs sb paca pacg").split()
HWCAP2_BITS = ("dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm "
               "svef32mm svef64mm svebf16 i8mm bf16 dgh rng bti mte ecv afp rpres mte3 sme "
               "smei16i64 smef64f64 smei8i32 smef16f32 smeb16f32 smef32f32 smefa64 wfxt ebf16 "
               "sveebf16 cssc rprfm sve2p1 sme2 sme2p1 smei16i32 smebi32i32 smeb16b16 "
               "smef16f16").split()


def decode_hwcaps(hwcap: int, hwcap2: int) -> list[str]:
    """Feature names of AT_HWCAP/AT_HWCAP2, as the kernel prints them in /proc/cpuinfo."""
    names = [n for i, n in enumerate(HWCAP_BITS) if hwcap >> i & 1]
    names += [n for i, n in enumerate(HWCAP2_BITS) if hwcap2 >> i & 1]
    return sorted(names)


# --- tools --------------------------------------------------------------------------------
def settings_of(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return config.get("emulation") or {}


def effective_settings(config: Mapping[str, Any], emulated: bool) -> dict[str, Any]:
    """What a host measures, in one place: the config's settings, and for an emulated host the
    lane's overlay (evidence only: no throughput, serving or bandwidth; its own quants, quality
    size, dispatch threads, workloads and method, and the emulated timeout). ``config`` is
    validated: the schema's defaults are filled in, so none is repeated here."""
    quality = dict(config.get("quality") or {})
    dispatch = {k: v for k, v in (config.get("dispatch") or {}).items() if k != "must_dispatch"}
    out: dict[str, Any] = {
        "quants": config["measure"].get("quants"), "models": None,
        "throughput": True, "serving": True,
        "bandwidth": bool(config["report"]["bandwidth_probe"]["enabled"]),
        "quality": quality, "dispatch": dispatch,
        "dispatch_threads": list(dispatch.get("threads") or []),
        "dispatch_toggle": bool(dispatch["toggle"]),
        "dispatch_sme_caps": [],
        "hotspots": bool((config.get("hotspots") or {}).get("enabled", False)),
        "kernel_tests": bool((config.get("kernel_tests") or {}).get("enabled", False)),
        # KleidiAI's own test suite: cheap under emulation too (its SME2 tests ran 37 s under
        # QEMU 11), so emulated hosts keep it
        "vendor_tests": bool(((config.get("kernel_tests") or {}).get("vendor") or {})
                             .get("enabled", True)),
        "timeout_s": None,
    }
    if not emulated:
        return out
    em = settings_of(config)
    emd = em.get("dispatch") or {}
    timeout = float(em["timeout_s"])
    dispatch = {**dispatch, "method": "qemu-exec", "timeout_s": timeout,
                "crosscheck": bool(emd["crosscheck"])}
    if emd.get("workloads"):
        dispatch["workloads"] = emd["workloads"]
    quality = {**quality, **(em.get("quality") or {})}
    quality["timeout_s"] = max(float(quality["timeout_s"]), timeout)
    out.update(quants=em.get("quants") or out["quants"], models=em.get("models"),
               throughput=False, serving=False, bandwidth=False, hotspots=False,
               kernel_tests=False, quality=quality, dispatch=dispatch,
               dispatch_threads=list(emd.get("threads") or out["dispatch_threads"]),
               dispatch_toggle=bool(emd["toggle"]),
               dispatch_sme_caps=[int(c) for c in emd.get("sme_caps") or []],
               timeout_s=timeout)
    return out


def qemu_path(settings: Mapping[str, Any]) -> str:
    name = str(settings.get("qemu", "qemu-aarch64-static"))
    path = shutil.which(name)
    if path is None:
        raise LadderError(f"emulation.qemu: {name!r} is not on PATH: the emulated aarch64 lane "
                          f"needs QEMU user mode ({APT_HINT})")
    return path


def cross_compilers() -> dict[str, str]:
    out = {}
    for lang, tool in (("c", f"{CROSS_PREFIX}gcc"), ("cxx", f"{CROSS_PREFIX}g++")):
        path = shutil.which(tool)
        if path is None:
            raise LadderError(f"cross compiler {tool} is not on PATH: the emulated aarch64 lane "
                              f"cross-builds with Debian's toolchain ({APT_HINT})")
        out[lang] = path
    return out


@lru_cache(maxsize=None)
def cross_compiler_identity() -> dict[str, str]:
    ident = {}
    for lang, exe in cross_compilers().items():
        res = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
        first = res.stdout.splitlines()[0] if res.stdout else "?"
        ident[lang] = f"{os.path.realpath(exe)}: {first}"
    return ident


def qemu_version(qemu: str) -> str:
    res = subprocess.run([qemu, "--version"], capture_output=True, text=True, check=False)
    return (res.stdout.splitlines() or ["?"])[0]


def qemu_cpu_models(qemu: str) -> list[str]:
    res = subprocess.run([qemu, "-cpu", "help"], capture_output=True, text=True, check=False)
    return [ln.strip() for ln in res.stdout.splitlines()[1:] if ln.strip()]


def check_cpu_model(qemu: str, model: str, host: str) -> None:
    known = qemu_cpu_models(qemu)
    if model not in known:
        raise LadderError(f"host {host}: cpu {model!r} is not a CPU model of {qemu} "
                          f"(it has: {', '.join(known) or 'none listed'})")


def launcher(settings: Mapping[str, Any], model: str) -> list[str]:
    """The argv prefix that runs a guest binary: qemu, the target sysroot, the CPU model."""
    return [str(settings.get("qemu", "qemu-aarch64-static")), "-L",
            str(settings.get("sysroot", "/usr/aarch64-linux-gnu")), "-cpu", model]


def qemu_cpu_of(models: Mapping[str, Any], model: str) -> str:
    """QEMU's name of a CPU model entry (``qemu_cpu``; the entry's key when not given): two
    entries can name one QEMU model under two emulators (``max`` under QEMU 7.2 and 11)."""
    return str((models.get(model) or {}).get("qemu_cpu") or model)


def host_launcher(settings: Mapping[str, Any], facts: Mapping[str, Any]) -> list[str]:
    """An emulated host's launcher from its facts: the emulator and QEMU model its facts were
    read under (a fetched emulator's path, or the system's), never re-resolved."""
    em = facts["emulated"]
    return launcher({**settings, "qemu": em["qemu"]}, str(em.get("qemu_cpu") or em["cpu"]))


# --- the HWCAP probe ----------------------------------------------------------------------
def build_probe(out_dir: str | os.PathLike[str]) -> Path:
    """Cross-compile the probe (static, so it needs no sysroot at run time)."""
    cc = cross_compilers()["c"]
    src = PROBE_SOURCE.read_bytes()
    out = Path(out_dir) / f"hwcap_probe-{canonical_hash(src.decode(), 12)}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        res = subprocess.run([cc, "-O1", "-static", "-o", str(tmp), str(PROBE_SOURCE)],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise LadderError(f"cross-compiling {PROBE_SOURCE} with {cc} failed: "
                              f"{res.stderr.strip()[:400]}")
        os.replace(tmp, out)
    return out


def probe_guest(qemu: str, model: str, probe: Path, timeout_s: float = 60) -> dict[str, Any]:
    """HWCAPs and vector lengths of the emulated CPU, read by a guest program."""
    import json

    try:
        res = subprocess.run([qemu, "-cpu", model, str(probe)], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise LadderError(f"HWCAP probe under {qemu} -cpu {model} timed out "
                          f"after {timeout_s:.0f} s") from exc
    if res.returncode != 0:
        raise LadderError(f"HWCAP probe under {qemu} -cpu {model} failed "
                          f"(exit {res.returncode}): {(res.stderr or res.stdout).strip()[:300]}")
    try:
        data = json.loads(res.stdout)
    except ValueError as exc:
        raise LadderError(f"HWCAP probe printed no JSON: {res.stdout[:200]!r}") from exc
    data["features"] = decode_hwcaps(int(data["hwcap"]), int(data["hwcap2"]))
    return data


def emulated_facts(*, host_name: str, model: str, settings: Mapping[str, Any],
                   probe_dir: str) -> dict[str, Any]:
    """Facts of an emulated host: the guest CPU's features; the x86 machine only as 'carrier'."""
    from ladder.core.machine import host_facts
    from ladder.core.hosts import cpu_identity

    models = settings.get("cpu_models") or {}
    if model not in models:
        raise LadderError(f"host {host_name}: cpu {model!r} has no entry in "
                          f"emulation.cpu_models (known: {', '.join(models) or 'none'})")
    # a model with an emulator of its own runs under that fetched binary (ladder.emulators)
    emulator = settings.get("emulator")
    qemu = str(emulator["binary"]) if emulator else qemu_path(settings)
    qemu_cpu = qemu_cpu_of(models, model)
    check_cpu_model(qemu, qemu_cpu, host_name)
    compiler = cross_compiler_identity()
    guest = probe_guest(qemu, qemu_cpu, build_probe(probe_dir))
    march = str(models[model]["march"])
    carrier = host_facts(host_name)  # memory, kernel, THP, OS: the machine qemu runs on
    facts: dict[str, Any] = {
        **{k: carrier.get(k) for k in ("host", "hostname", "cores", "mem_total_kib", "kernel",
                                       "os", "thp", "python", "scheduler_job")},
        "lscpu": {},  # the x86 carrier's lscpu is under emulated.carrier
        "arch": "aarch64",
        "cpu_model": f"QEMU -cpu {qemu_cpu} (emulated)" + (
            f" under {emulator['name']} ({emulator['version']})" if emulator else ""),
        "cpu_flags": guest["features"],
        "compiler": compiler,
        # not what -mcpu=native expands to: cross builds name the target explicitly
        "native_target": {"flag": "GGML_CPU_ARM_ARCH (explicit: cross build)", "resolved": march,
                          "fingerprint": canonical_hash(["-march=" + march], 16)},
        "emulated": {
            "kind": KIND, "cpu": model, "qemu_cpu": qemu_cpu,
            "class": models[model].get("class"), "march": march,
            "qemu": qemu, "qemu_version": qemu_version(qemu),
            # the fetched emulator's record (package, version, sha256s, URL); None: the system's
            "emulator": ({k: emulator.get(k) for k in (
                "name", "id", "package", "version", "sha256", "deb", "url", "binary_sha256")}
                if emulator else None),
            "sysroot": str(settings.get("sysroot", "/usr/aarch64-linux-gnu")),
            "hwcap": guest["hwcap"], "hwcap2": guest["hwcap2"],
            "sve_vl_bytes": guest.get("sve_vl"), "sme_vl_bytes": guest.get("sme_vl"),
            "carrier": {k: carrier.get(k) for k in ("arch", "cpu_model", "cpu_flags", "lscpu")},
        },
        "ccache_scope": "cross-" + CROSS_PREFIX.rstrip("-"),
    }
    facts["identity"] = cpu_identity(facts)
    return facts


# --- rungs --------------------------------------------------------------------------------
def emulated_recipe(recipe: Any, march: str, targets: Sequence[str]) -> Any:
    """A rung's recipe cross-built: explicit -march for a native rung, ggml linked statically."""
    cmake = dict(recipe.cmake)
    if recipe.native:
        cmake["GGML_NATIVE"] = "OFF"
        cmake["GGML_CPU_ARM_ARCH"] = march
    # ggml linked into each tool: one binary holds every kernel symbol (qemu loads symbols of
    # the main binary only), at one load bias (guest_load_bias)
    cmake["BUILD_SHARED_LIBS"] = "OFF"
    return replace(recipe, cmake=cmake, targets=tuple(targets), toolchain=TOOLCHAIN_FILE.name)


def emulated_rungs(rungs: Iterable[Any], march: str, targets: Sequence[str]) -> list[Any]:
    out = []
    for r in rungs:
        recipe = emulated_recipe(r.recipe, march, targets)
        adds = r.adds
        if r.recipe.native:
            adds = adds.replace("-mcpu=native", f"-march={march} (explicit: emulated)")
        out.append(replace(r, recipe=recipe, adds=adds))
    return out


# --- dispatch: QEMU's execution log -------------------------------------------------------
TRACE = re.compile(r"^Trace (?P<cpu>\d+): 0x[0-9a-f]+ \[[0-9a-f]+/(?P<pc>[0-9a-f]+)/", re.M)


START_CODE = re.compile(r"^start_code\s+0x(?P<addr>[0-9a-f]+)", re.M)


def exec_segment_vaddr(binary: str | os.PathLike[str]) -> int:
    """Lowest virtual address of an executable LOAD segment (readelf reads any ELF arch)."""
    res = subprocess.run(["readelf", "-lW", str(binary)], capture_output=True, text=True,
                         check=False)
    addrs = [int(p[2], 16) for p in (ln.split() for ln in res.stdout.splitlines())
             if p and p[0] == "LOAD" and "E" in p[6:-1]]
    if not addrs:
        raise LadderError(f"readelf {binary}: no executable LOAD segment "
                          f"({res.stderr.strip()[:200]})")
    return min(addrs)


def start_code(log_text: str) -> int | None:
    m = START_CODE.search(log_text)
    return int(m.group("addr"), 16) if m else None


def guest_load_bias(prefix: Sequence[str], binary: str, work_dir: str,
                    timeout_s: float = 120) -> int:
    """Where qemu loads ``binary`` (0 for a non-PIE one): ``-d page`` prints start_code. Each
    instrumented run logs it again (exec_log_argv) and is checked against this."""
    log = Path(work_dir) / "qemu-page.log"
    subprocess.run([*prefix, "-d", "page", "-D", str(log), binary, "--help"],
                   capture_output=True, timeout=timeout_s, check=False)
    text = log.read_text(errors="replace") if log.exists() else ""
    log.unlink(missing_ok=True)
    start = start_code(text)
    if start is None:
        raise LadderError(f"{prefix[0]} -d page printed no start_code for {binary}: the load "
                          "address of its symbols cannot be told")
    return start - exec_segment_vaddr(binary)


def exec_log_argv(prefix: Sequence[str], entries: Iterable[int], log_path: str) -> list[str]:
    """qemu options that log every entry into a translated block starting at one of
    ``entries`` (guest addresses): ``nochain`` makes every block entry pass QEMU's main loop
    (chained blocks would jump past the log), ``-dfilter`` keeps only the symbols' first bytes,
    ``page`` logs the load address the entries assume."""
    return _log_argv(prefix, "exec,nochain,page", entries, log_path)


def _log_argv(prefix: Sequence[str], items: str, entries: Iterable[int],
              log_path: str) -> list[str]:
    """``qemu -d items`` logged to ``log_path``, filtered to the first bytes of ``entries``."""
    ranges = ",".join(f"{a:#x}+4" for a in sorted(set(entries)))
    return [*prefix, "-d", items, "-dfilter", ranges, "-D", log_path]


def count_entries(log_text: str, entries: Mapping[int, str]) -> tuple[dict[str, int],
                                                                       dict[str, list[int]]]:
    """Hits per probe id, and the guest vCPUs (threads) each probe ran on."""
    hits: Counter[str] = Counter()
    cpus: dict[str, set[int]] = {}
    for m in TRACE.finditer(log_text):
        pid = entries.get(int(m.group("pc"), 16))
        if pid is not None:
            hits[pid] += 1
            cpus.setdefault(pid, set()).add(int(m.group("cpu")))
    return dict(hits), {k: sorted(v) for k, v in cpus.items()}


def thread_counts(log_text: str, entries: Mapping[int, str]) -> dict[str, dict[int, int]]:
    """Hits per probe id and guest vCPU (thread): how a family's work split over threads."""
    out: dict[str, Counter[int]] = {}
    for m in TRACE.finditer(log_text):
        pid = entries.get(int(m.group("pc"), 16))
        if pid is not None:
            out.setdefault(pid, Counter())[int(m.group("cpu"))] += 1
    return {k: dict(sorted(v.items())) for k, v in out.items()}


# --- one process, many cells: llama-bench runs its tests in one process, the model loaded once
# (under QEMU the load is most of a small cell's time: 25 of 30 s for Gemma 270M's decode_short).
# It creates one context per test, in its own order; the entries of this symbol cut the exec log
# into the tests' segments.
TEST_MARKER = "llama_init_from_model"


def bench_order(n_prompts: Sequence[int], n_gens: Sequence[int],
                threads: Sequence[int]) -> list[tuple[int, int, int]]:
    """(n_prompt, n_gen, threads) of each test, in the order llama-bench runs them for
    ``-p P1,.. -n N1,.. -t T1,..`` (tools/llama-bench: threads outside, then every prompt test,
    then every generation test; a 0 runs no test)."""
    return [test for t in threads
            for test in [(p, 0, t) for p in n_prompts if p] + [(0, n, t) for n in n_gens if n]]


def ran_order(stdout: str) -> list[tuple[int, int, int]] | None:
    """The tests llama-bench's ``-o json`` reports, in its order (None: no such output)."""
    import json

    try:
        records = json.loads(stdout)
        return [(int(r["n_prompt"]), int(r["n_gen"]), int(r["n_threads"])) for r in records]
    except (ValueError, TypeError, KeyError):
        return None


def split_at_marker(log_text: str, marker: int) -> list[str]:
    """The exec log after each entry of ``marker`` (one piece per test, in order); what came
    before the first entry (the model load) is not part of any test."""
    cuts = [m.start() for m in TRACE.finditer(log_text) if int(m.group("pc"), 16) == marker]
    return [log_text[a:b] for a, b in zip(cuts, cuts[1:] + [len(log_text)])]


IN_ASM = re.compile(r"^IN:[^\n]*\n0x(?P<pc>[0-9a-f]+):", re.M)


def translation_log_argv(prefix: Sequence[str], entries: Iterable[int],
                         log_path: str) -> list[str]:
    """qemu options that log each translated block starting at one of ``entries``: QEMU
    translates a block when execution first reaches it, so a logged entry ran at least once.
    The filter is checked per translation, not per execution: no measurable cost."""
    return _log_argv(prefix, "in_asm", entries, log_path)


def count_translations(log_text: str, entries: Mapping[int, str]) -> dict[str, int]:
    """Probe id -> 1 for every entry QEMU translated (presence, not a count of calls)."""
    out: dict[str, int] = {}
    for m in IN_ASM.finditer(log_text):
        pid = entries.get(int(m.group("pc"), 16))
        if pid is not None:
            out[pid] = 1
    return out


QEMU_SIGNAL = re.compile(r"qemu: uncaught target signal (?P<num>\d+) \((?P<name>[^)]*)\)")


def guest_crash(stderr: str) -> str | None:
    """QEMU's own line for a guest killed by a signal (qemu then dies of the same signal)."""
    m = QEMU_SIGNAL.search(stderr)
    return m.group(0) if m else None


# --- the cross-check: QEMU's gdbstub, single guest thread ---------------------------------
GDB_BREAK = re.compile(r"^(?P<num>\d+)\s+breakpoint\s+keep\s+\w+\s+0x(?P<addr>[0-9a-f]+)", re.M)
GDB_HITS = re.compile(r"breakpoint already hit (?P<n>\d+) times?")


def parse_gdb_breakpoints(text: str) -> dict[int, int]:
    """address -> hits from gdb's 'info breakpoints' (a breakpoint never hit has no hit line)."""
    out: dict[int, int] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = GDB_BREAK.match(line)
        if not m:
            continue
        hits = 0
        for nxt in lines[i + 1:i + 4]:
            if GDB_BREAK.match(nxt):
                break
            h = GDB_HITS.search(nxt)
            if h:
                hits = int(h.group("n"))
                break
        out[int(m.group("addr"), 16)] = hits
    return out


SEGMENT_MARK, END_MARK = "ladder-segment", "ladder-end"


def gdb_script(tool: str, sock: Path, entries: Iterable[int], marker: int | None,
               sysroot: str) -> str:
    """gdb's commands: a breakpoint on each entry whose ignore count never runs out (gdb counts
    and resumes by itself); with a ``marker``, a breakpoint there that prints the counts so far
    and resumes, so each test of a many-test process gets counts of its own."""
    lines = ["set pagination off", "set confirm off", f"set sysroot {sysroot}", f"file {tool}",
             f"target remote {sock}"]
    addrs = sorted(entries)
    for i, a in enumerate(addrs, start=1):
        lines += [f"break *{a:#x}", f"ignore {i} 2000000000"]
    if marker is not None:
        lines += [f"break *{marker:#x}", "commands", "silent", f"echo {SEGMENT_MARK}\\n",
                  "info breakpoints", "continue", "end"]
    lines += ["continue", f"echo {END_MARK}\\n", "info breakpoints"]
    return "\n".join(lines) + "\n"


def _split_line(text: str, mark: str) -> tuple[str, str, str]:
    m = re.search(rf"^{mark}$", text, re.M)
    return (text[:m.start()], mark, text[m.end():]) if m else (text, "", "")


def segment_counts(text: str, entries: Mapping[int, str]) -> list[dict[str, int]]:
    """Per test, the calls gdb counted between one marker stop and the next (the last test: up
    to the final count at exit); [] without marker stops."""
    # line-anchored: 'info breakpoints' also lists the marker's commands (indented)
    head, _, final = _split_line(text, END_MARK)
    tables = [parse_gdb_breakpoints(t) for t in
              re.split(rf"^{SEGMENT_MARK}$", head, flags=re.M)[1:]]
    tables.append(parse_gdb_breakpoints(final))
    out = []
    for before, after in zip(tables, tables[1:]):
        out.append({entries[a]: after.get(a, 0) - before.get(a, 0) for a in entries
                    if after.get(a, 0) - before.get(a, 0)})
    return out


def gdbstub_counts(prefix: Sequence[str], tool_argv: Sequence[str], entries: Mapping[int, str],
                   work_dir: str, env: Mapping[str, str], timeout_s: float,
                   sysroot: str = "/usr/aarch64-linux-gnu",
                   marker: int | None = None) -> dict[str, Any]:
    """Count calls a second, independent way: QEMU's gdbstub on a unix socket (no network),
    gdb-multiarch with a breakpoint on each entry whose ignore count never runs out, so gdb
    counts every hit and resumes by itself; with a ``marker`` (the test boundary), counts per
    test as well (``segments``). Single guest thread only: with two guest threads the stub
    stalled here (a bounded run, killed). Both processes die when this returns."""
    import signal
    import time

    gdb = shutil.which("gdb-multiarch")
    if gdb is None:
        return {"method": "gdbstub", "skipped": "gdb-multiarch not installed "
                "(apt-get install gdb-multiarch)"}
    sock = Path(work_dir) / f"gdbstub-{os.getpid()}.sock"
    sock.unlink(missing_ok=True)
    t0 = time.monotonic()
    # the guest's stderr goes to a file: a pipe nobody reads fills up (llama-bench -v writes
    # ~150 KB) and blocks the guest, and gdb with it, until the timeout
    guest_err = open(Path(work_dir) / f"gdbstub-{os.getpid()}.stderr", "wb")
    qemu = subprocess.Popen([*prefix, "-g", str(sock), *tool_argv], stdout=subprocess.DEVNULL,
                            stderr=guest_err, env={**os.environ, **env},
                            start_new_session=True)
    guest_err.close()
    result: dict[str, Any] = {"method": "gdbstub (qemu -g <unix socket>, gdb-multiarch "
                                        "breakpoints with ignore counts)"}
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline and qemu.poll() is None:
            time.sleep(0.05)
        if not sock.exists():
            result["error"] = "qemu's gdbstub socket never appeared"
            return result
        script = Path(work_dir) / f"gdbstub-{os.getpid()}.gdb"
        script.write_text(gdb_script(tool_argv[0], sock, entries, marker, sysroot))
        argv = [gdb, "-nx", "-batch", "-x", str(script)]
        try:
            res = subprocess.run(argv, capture_output=True, text=True,
                                 timeout=max(timeout_s - (time.monotonic() - t0), 10),
                                 check=False)
        except subprocess.TimeoutExpired:
            result["error"] = f"timed out after {timeout_s:.0f} s (qemu and gdb killed)"
            outcome.note(f"{Path(tool_argv[0]).name} under qemu's gdbstub: {result['error']}")
            return result
        text = res.stdout + res.stderr
        result["exited_normally"] = "exited normally" in text
        if not result["exited_normally"]:
            result["error"] = "the guest did not run to its end under gdb: " + " ".join(
                text.strip().splitlines()[-2:])[:300]
        by_addr = parse_gdb_breakpoints(_split_line(res.stdout, END_MARK)[2] or text)
        result["counts"] = {entries[a]: n for a, n in by_addr.items() if a in entries and n}
        if marker is not None:
            result["segments"] = segment_counts(res.stdout, entries)
        return result
    finally:
        try:
            os.killpg(qemu.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        qemu.wait()
        sock.unlink(missing_ok=True)
        result["wall_s"] = round(time.monotonic() - t0, 2)
