"""What the machine gave a tool that ``run.run`` does not start (a server a harness drives for
a round): the same shares ``run.machine_share`` computes for a process it ran, from the
machine's CPU time over the tool's life and the tool's own. Apart from ``run`` so that the
modules every measuring rule reaches do not change for it (``run.run`` computes the same
inline; it takes ``Watch`` when ``run`` next changes for a reason of its own)."""

from __future__ import annotations

import resource
import time

from ladder.core.run import _HZ, cpu_jiffies, machine_share


class Watch:
    """Started before the tool, read with the tool's own CPU time once it has done its work."""

    def __init__(self) -> None:
        self.before = cpu_jiffies()
        self.self_before = resource.getrusage(resource.RUSAGE_SELF)
        self.start = time.monotonic()

    def share(self, tool_cpu_s: float) -> dict[str, float]:
        """``machine_share`` since the start; our own CPU time (e.g. a load generator's
        threads) is ours, not another process's."""
        after = resource.getrusage(resource.RUSAGE_SELF)
        return machine_share(self.before, cpu_jiffies(), time.monotonic() - self.start,
                             tool_cpu_s, (after.ru_utime + after.ru_stime)
                             - (self.self_before.ru_utime + self.self_before.ru_stime))


def process_cpu_s(pid: int) -> float:
    """A running process's user + system CPU time (every thread), from /proc/<pid>/stat; 0 when
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _HZ
