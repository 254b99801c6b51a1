"""Facts about the measuring host, recorded beside every result."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from ladder.recipes import compiler_identity, host_arch, host_cpu_flags


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


def mem_total_kib() -> int | None:
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return None


def host_facts() -> dict[str, Any]:
    cpu = lscpu()
    return {
        "hostname": socket.gethostname(),
        "arch": host_arch(),
        "cpu_model": cpu.get("Model name") or platform.processor() or None,
        "cores": os.cpu_count(),
        "lscpu": cpu,
        "cpu_flags": sorted(host_cpu_flags()),
        "mem_total_kib": mem_total_kib(),
        "kernel": platform.release(),
        "os": (_read("/etc/os-release") or "").split("PRETTY_NAME=")[-1].split("\n")[0].strip('"')
        or None,
        "thp": thp_mode(),
        "compiler": compiler_identity(),
        "python": platform.python_version(),
    }


def host_brief() -> dict[str, Any]:
    """The per-sample subset: what must agree before samples are combined."""
    return {"hostname": socket.gethostname(), "arch": host_arch(), "thp": thp_mode(),
            "cpu_model": lscpu().get("Model name")}
