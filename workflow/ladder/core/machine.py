"""This machine: what it is (arch, CPU flags, compiler, what -march/-mcpu=native means here)
and the facts recorded beside every result. Config hosts are ladder.hosts; a host's plan is
ladder.plan."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ladder.core.hosts import cpu_identity
from ladder.core.errors import LadderError
from ladder.core.io import canonical_hash


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)


# --- host and toolchain identity -------------------------------------------------------------


@lru_cache(maxsize=None)
def host_cpu_flags() -> frozenset[str]:
    """CPU feature flags the kernel reports (x86 'flags', Arm 'Features')."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in {"flags", "Features"}:
            return frozenset(value.split())
    return frozenset()


def _compiler(env_var: str, default: str) -> str:
    return os.environ.get(env_var) or default


@lru_cache(maxsize=None)
def compiler_identity() -> dict[str, str]:
    """Resolved path and version line of the C and C++ compilers cmake will pick up."""
    ident: dict[str, str] = {}
    for lang, var, default in (("c", "CC", "cc"), ("cxx", "CXX", "c++")):
        exe = shutil.which(_compiler(var, default))
        if exe is None:
            raise LadderError(
                f"no {lang.upper()} compiler: {_compiler(var, default)!r} is not on PATH "
                f"(install gcc/g++, e.g. 'apt-get install build-essential', or set {var})"
            )
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
        ident[lang] = f"{os.path.realpath(exe)}: {out.stdout.splitlines()[0] if out.stdout else '?'}"
    return ident


@lru_cache(maxsize=None)
def native_target() -> dict[str, str]:
    """What '-march=native' (x86) / '-mcpu=native' (Arm) expands to for this compiler and CPU."""
    cc = shutil.which(_compiler("CC", "cc")) or "cc"
    flag = "-mcpu=native" if host_arch() == "aarch64" else "-march=native"
    out = subprocess.run(
        [cc, flag, "-###", "-E", "-x", "c", os.devnull], capture_output=True, text=True, check=False
    )
    cc1 = next((ln for ln in out.stderr.splitlines() if "cc1" in ln), "")
    tokens = [t.strip('"') for t in cc1.split()]
    mflags = [t for t in tokens if t.startswith(("-march=", "-mcpu=", "-mtune=", "-m"))]
    arch = next((t.split("=", 1)[1] for t in mflags if t.startswith(("-march=", "-mcpu="))), "?")
    return {"flag": flag, "resolved": arch, "fingerprint": canonical_hash(sorted(mflags), 16)}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def thp_mode() -> str | None:
    """The bracketed choice of /sys/kernel/mm/transparent_hugepage/enabled, e.g. 'madvise'."""
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    if not text:
        return None
    for word in text.split():
        if word.startswith("["):
            return word.strip("[]")
    return text


@lru_cache(maxsize=None)
def lscpu() -> dict[str, str]:
    if shutil.which("lscpu") is None:
        return {}
    res = subprocess.run(["lscpu"], capture_output=True, text=True, check=False,
                         env={**os.environ, "LC_ALL": "C"})
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def cpu_model() -> str | None:
    return lscpu().get("Model name") or platform.processor() or None


def mem_total_kib() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return None


@lru_cache(maxsize=None)
def local_identity() -> str:
    """This node's CPU identity (what a native build is keyed by)."""
    return cpu_identity({"arch": host_arch(), "cpu_model": cpu_model(),
                         "cpu_flags": sorted(host_cpu_flags()), "native_target": native_target()})


def scheduler_job() -> dict[str, str] | None:
    """The SLURM job this process runs in (None outside SLURM): proof of where a job ran."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    keys = ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_JOB_NODELIST", "SLURM_CPUS_PER_TASK",
            "SLURM_JOB_NAME")
    return {k.removeprefix("SLURM_").lower(): os.environ[k] for k in keys if k in os.environ}


def host_facts(host_name: str | None = None) -> dict[str, Any]:
    """Everything known about the node this runs on (run it there: a host_facts job)."""
    cpu = lscpu()
    facts = {
        "host": host_name,
        "hostname": socket.gethostname(),
        "arch": host_arch(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        # the CPUs this process may run on (a cgroup or taskset narrows them; a SLURM node
        # without task binding does not: Plan.threads_all caps them at the host's cpus)
        "usable_cpus": len(os.sched_getaffinity(0)),
        "lscpu": cpu,
        "cpu_flags": sorted(host_cpu_flags()),
        "mem_total_kib": mem_total_kib(),
        "kernel": platform.release(),
        "os": (_read("/etc/os-release") or "").split("PRETTY_NAME=")[-1].split("\n")[0].strip('"')
        or None,
        "thp": thp_mode(),
        "compiler": compiler_identity(),
        "native_target": native_target(),
        "python": platform.python_version(),
        "scheduler_job": scheduler_job(),
    }
    facts["identity"] = local_identity()
    return facts


def host_brief(guest: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The per-sample subset: what must agree before samples are combined, and where it ran.

    A run under qemu (``guest``: the rung's guest CPU) names the emulated CPU and drops the x86
    identity: an emulated host's identity is its guest CPU's, from its facts."""
    job = scheduler_job() or {}
    if guest:
        return {**host_brief(), "identity": None,
                "emulated": {"cpu": guest.get("cpu"), "arch": guest.get("arch")}}
    return {"hostname": socket.gethostname(), "arch": host_arch(), "thp": thp_mode(),
            "cpu_model": cpu_model(),
            "identity": local_identity(),
            "slurm_job_id": job.get("job_id"), "slurm_partition": job.get("job_partition")}


def cpu_set(threads: int, policy: str | Sequence[int] | None = "auto",
            allowed: Iterable[int] | None = None, job_cpus: int | None = None
            ) -> list[int] | None:
    """The fixed CPUs every process of a cell runs on (pure; ``allowed`` defaults to this
    process's affinity, which inside a SLURM job is the job's CPUs).

    ``auto``: ``threads`` CPUs of the allowed ones in order, leaving CPU 0 (interrupts,
    housekeeping) out when there are spare CPUs; ``none``/None: no placement (the OS decides);
    a list: exactly those CPUs, which must be allowed and number ``threads``.

    ``job_cpus``: the CPUs a scheduler gave the job. When the job may run on more CPUs than
    that (a SLURM node shared by several jobs, without the scheduler binding each to its own),
    which CPUs are this job's is unknown: ``auto`` then places nothing (two jobs would otherwise
    pick the same CPUs)."""
    have = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if policy is None or policy == "none":
        return None
    if policy == "auto" and job_cpus and job_cpus < len(have):
        return None
    if isinstance(policy, str):
        if policy != "auto":
            raise LadderError(f"measure.cpus: {policy!r} is not auto, none or a list of CPUs")
        if threads > len(have):
            raise LadderError(f"measure.cpus auto: {threads} threads, but only {len(have)} "
                              f"CPUs are allowed here ({have})")
        pool = [c for c in have if c != 0] if len(have) > threads else have
        return pool[:threads]
    want = sorted(int(c) for c in policy)
    if len(want) != threads:
        raise LadderError(f"measure.cpus {want}: {len(want)} CPUs for {threads} threads "
                          "(a cell's CPU set is sized to its thread count)")
    if not set(want) <= set(have):
        raise LadderError(f"measure.cpus {want}: CPUs {sorted(set(want) - set(have))} are not "
                          f"allowed here (allowed: {have})")
    return want


def parse_cpu_list(text: str) -> list[int]:
    """'0-2,5' (Cpus_allowed_list, taskset -c) -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def task_cpus(pid: int) -> dict[int, list[int]]:
    """Each thread of a running process and the CPUs it may run on, from
    /proc/<pid>/task/*/status (empty when the process is gone)."""
    out: dict[int, list[int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        text = _read(f"/proc/{pid}/task/{tid}/status") or ""
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[int(tid)] = parse_cpu_list(line.split(":", 1)[1])
    return out
