"""A real single-node SLURM cluster from Debian's packages (munge, slurmctld, slurmd), for tests.

Two partitions on the one node stand in for two hosts. The config goes to /etc/slurm/slurm.conf:
the SLURM executor's job steps drop SLURM_CONF before their nested srun, so only the default
path works. An existing slurm.conf that is not ours is never touched. Daemons are stopped by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# ladder test cluster"
DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str | None:
    """Why this machine cannot run the test cluster, or None."""
    if os.geteuid() != 0:
        return "the SLURM test cluster needs root (daemons, /etc/slurm)"
    absent = [d for d in DAEMONS if not Path(f"/usr/sbin/{d}").exists()]
    if absent or not shutil.which("sbatch"):
        return f"SLURM/munge not installed ({', '.join(absent) or 'sbatch'}): apt-get install slurm-wlm munge"
    if CONF.exists() and MARKER not in CONF.read_text():
        return f"{CONF} exists and is not the test cluster's: refusing to replace it"
    return None


def _conf(state: Path, partitions: list[str], cpus: int, mem_mb: int) -> str:
    node = socket.gethostname()
    lines = [
        MARKER,
        "ClusterName=ladder",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge",
        f"StateSaveLocation={state}/ctld", f"SlurmdSpoolDir={state}/d",
        f"SlurmctldPidFile={state}/slurmctld.pid", f"SlurmdPidFile={state}/slurmd.pid",
        f"SlurmctldLogFile={state}/slurmctld.log", f"SlurmdLogFile={state}/slurmd.log",
        "SlurmctldPort=16817", "SlurmdPort=16818",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU_Memory",
        # squeue-based status checks need finished jobs to stay visible (FACTS.md)
        "MinJobAge=300", "ReturnToService=2",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN",
    ]
    for i, p in enumerate(partitions):
        lines.append(f"PartitionName={p} Nodes={node} MaxTime=INFINITE State=UP"
                     + (" Default=YES" if i == 0 else ""))
    return "\n".join(lines) + "\n"


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def _stop(pid: int | None, pidfile: Path | None = None) -> None:
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)  # type: ignore[arg-type]
        for _ in range(50):
            if not _alive(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
    if pidfile:
        pidfile.unlink(missing_ok=True)  # slurmctld cannot remove its own


@contextmanager
def cluster(state: Path, partitions: list[str]) -> Iterator[dict[str, str]]:
    """Start munge + slurmctld + slurmd; yield facts; stop what was started, by PID."""
    state.mkdir(parents=True, exist_ok=True)
    cpus = os.cpu_count() or 1
    mem_mb = int(int(Path("/proc/meminfo").read_text().split()[1]) / 1024 * 0.8)
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(_conf(state, partitions, cpus, mem_mb))
    started: list[tuple[int | None, Path | None]] = []
    munge_pidfile = Path("/run/munge/munged.pid")
    try:
        if not _alive(_pid(munge_pidfile)):
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge", "munge")
            subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"],
                           check=True, timeout=30)
            started.append((_pid(munge_pidfile), munge_pidfile))
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([f"/usr/sbin/{daemon}"], check=True, timeout=30)
            pidfile = state / f"{daemon}.pid"
            for _ in range(50):
                if _pid(pidfile):
                    break
                time.sleep(0.1)
            started.append((_pid(pidfile), pidfile))
        for _ in range(100):
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                                 timeout=30).stdout.split()
            if out and all(s == "idle" for s in out):
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"SLURM node never became idle: {out} "
                               f"(see {state}/slurmctld.log, {state}/slurmd.log)")
        yield {"node": socket.gethostname(), "state": str(state)}
    finally:
        for pid, pidfile in reversed(started):
            _stop(pid, pidfile)
        if CONF.exists() and MARKER in CONF.read_text():
            CONF.unlink()
