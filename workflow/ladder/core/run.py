"""Run a measured tool: capture its output, its peak RSS and how it ended (exit code or signal)."""

from __future__ import annotations

import ctypes
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Mapping, Sequence

from ladder.core import outcome
from ladder.core.machine import task_cpus


@dataclass
class RunResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_kib: int
    timed_out: bool = False
    env: dict[str, str] = field(default_factory=dict)
    # what the process got from the machine over its run (see machine_share)
    cpu_s: float = 0.0  # the tool's own user + system CPU time
    machine: dict[str, float] = field(default_factory=dict)
    # where its threads were allowed to run, read back from /proc while it ran (cpus=...): the
    # union over its threads and reads, and how many threads were seen
    cpus_seen: list[int] | None = None
    threads_seen: int = 0

    @property
    def signal_name(self) -> str | None:
        if self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self) -> str | None:
        if self.timed_out:
            return f"timed out after {self.wall_s:.0f} s"
        if self.signal_name:
            return f"killed by {self.signal_name}"
        if self.returncode != 0:
            tail = [ln for ln in self.stderr.strip().splitlines() if ln.strip()][-1:] or [""]
            return f"exit code {self.returncode}: {tail[0][:300]}"
        return None


def run(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout_s: float | None = None,
    cwd: str | os.PathLike[str] | None = None,
    cpus: Sequence[int] | None = None,
) -> RunResult:
    """Run without a shell (config values never meet a shell), in its own process group.

    ``cpus``: the process (and every thread it starts) may run only there (sched_setaffinity
    before exec, as taskset does); its threads' allowed CPUs are read back from /proc every
    ~0.1 s while it runs (``cpus_seen``), so a caller can check the placement held."""
    full_env = {**os.environ, **(env or {})}
    seen: set[int] = set()
    tids: set[int] = set()
    before, self_before = cpu_jiffies(), resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    with (
        open(os.devnull, "rb") as devnull,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        proc = subprocess.Popen(
            list(argv), stdin=devnull, stdout=out, stderr=err, env=full_env, cwd=cwd,
            start_new_session=True,
            preexec_fn=_no_core_dumps if cpus is None else partial(_pinned, list(cpus)),
        )
        timed_out = False
        deadline = None if timeout_s is None else start + timeout_s
        status = 0
        rusage = None
        polls = 0
        while True:
            if cpus is not None and polls % 5 == 0:  # before reaping: a zombie still shows it
                for tid, allowed in task_cpus(proc.pid).items():
                    tids.add(tid)
                    seen.update(allowed)
            polls += 1
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.monotonic() > deadline:
                timed_out = True
                _kill_group(proc.pid)
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        _kill_group(proc.pid)  # no helper process outlives the run
        wall = time.monotonic() - start
        after, self_after = cpu_jiffies(), resource.getrusage(resource.RUSAGE_SELF)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    outside = outcome.of_exit(proc.returncode, timed_out)
    if outside:  # the job's outputs are checked again next run (ladder.core.outcome)
        outcome.note(f"{Path(str(argv[0])).name}: {outside}")
    return RunResult(
        argv=list(argv), returncode=proc.returncode, stdout=stdout, stderr=stderr, wall_s=wall,
        peak_rss_kib=int(rusage.ru_maxrss) if rusage else 0, timed_out=timed_out,
        env=dict(env or {}),
        cpu_s=(rusage.ru_utime + rusage.ru_stime) if rusage else 0.0,
        machine=machine_share(before, after, wall,
                              (rusage.ru_utime + rusage.ru_stime) if rusage else 0.0,
                              (self_after.ru_utime + self_after.ru_stime)
                              - (self_before.ru_utime + self_before.ru_stime)),
        cpus_seen=sorted(seen) if cpus is not None else None, threads_seen=len(tids),
    )


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_jiffies() -> tuple[int, int, int] | None:
    """(busy, steal, all) jiffies of the whole machine since boot, from /proc/stat's cpu line
    (busy = user + nice + system + irq + softirq; guest time is inside user)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    return user + nice + system + irq + softirq, steal, sum(fields[:8])


def machine_share(before: tuple[int, int, int] | None, after: tuple[int, int, int] | None,
                  wall_s: float, tool_cpu_s: float, self_cpu_s: float) -> dict[str, float]:
    """What else the machine did while a tool ran: the share of all CPUs over its wall time
    that other processes used (foreign) and that the hypervisor took (steal). Pure."""
    if before is None or after is None or wall_s <= 0:
        return {}
    ncpu = os.cpu_count() or 1
    busy_s = (after[0] - before[0]) / _HZ
    steal_s = (after[1] - before[1]) / _HZ
    capacity = wall_s * ncpu
    foreign = max(0.0, busy_s - tool_cpu_s - self_cpu_s)
    return {"foreign_cpu_share": round(foreign / capacity, 4),
            "steal_share": round(steal_s / capacity, 4), "ncpu": ncpu}


_PR_SET_PDEATHSIG = 1


def _no_core_dumps() -> None:
    # A crashing rung must not write a core dump while the next rung is being measured.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The child runs in its own session (so a timeout kills its whole group): it must also die
    # with this process, or a SIGKILLed run would leave it measuring beside the resumed one.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the timeout still kills the group
        pass


def _pinned(cpus: list[int]) -> None:
    os.sched_setaffinity(0, cpus)
    _no_core_dumps()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


FRAME0 = re.compile(r"^#0\s+(?:0x[0-9a-f]+ in )?(?P<frame>.+)$", re.M)


RETURN_TYPE = re.compile(r"^(?:static |const |unsigned )*(?:void|bool|int|float|double|char|long)\*? ")


def frame_symbol(frame: str) -> str:
    """The function of a gdb frame line: no return type, arguments or location.

    gdb prints templates with their return type first ("void (anonymous namespace)::f<T>(args)
    () from lib") and lambdas inside their enclosing function ("f(args)::{lambda(int)#4}::...").
    """
    text = frame.replace("(anonymous namespace)", "{anon}")
    text = RETURN_TYPE.sub("", text)
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch in "( " and depth == 0:
            cut = i
            break
    name = text[:cut].replace("{anon}", "(anonymous namespace)")
    return name + ("::{lambda}" if "{lambda" in text else "")


GDB_SIGNAL = re.compile(r"received signal (?P<sig>SIG[A-Z0-9]+)")


def diagnose_crash(
    argv: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = 600
) -> dict[str, str | None]:
    """Rerun a crashing command under gdb (batch) to name the signal and the faulting symbol."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return {"method": None, "signal": None, "symbol": None,
                "note": "gdb not installed: faulting symbol unknown"}
    res = run(
        [gdb, "-nx", "-batch", "-ex", "set pagination off", "-ex", "set confirm off",
         "-ex", "run", "-ex", "bt 8", "-ex", "x/i $pc", "-ex", "kill", "--args", *argv],
        env=env, timeout_s=timeout_s,
    )
    text = res.stdout + "\n" + res.stderr
    sig = GDB_SIGNAL.search(text)
    frame = FRAME0.search(text)
    insn = re.search(r"=> 0x[0-9a-f]+ <[^>]+>:\s*(?P<insn>.+)", text)
    return {
        "method": "gdb -batch",
        "signal": sig.group("sig") if sig else None,
        "symbol": frame_symbol(frame.group("frame")) if frame else None,
        "instruction": insn.group("insn").strip() if insn else None,
        "backtrace": "\n".join(ln for ln in text.splitlines() if ln.startswith("#"))[:4000],
    }
