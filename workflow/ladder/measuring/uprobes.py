"""Exact call counts through Linux uprobes (tracefs ``uprobe_events`` + ``uprobe_profile``).

A session registers every probe once, enables its group, and reads per-probe hit counts as
deltas of the global, cumulative ``uprobe_profile`` around each run (one run at a time: every
process mapping the library is counted). Disabling costs ~50 ms per probe on this kernel, so a
session spans a whole sweep, and the group is always disabled and deleted on exit, also after
an error. Groups left by a dead session (``ladder_<pid>``) are removed on the next start.
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path
from typing import Iterable

from ladder.core.errors import LadderError
from ladder.core.kernels import Probe

TRACEFS_CANDIDATES = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
GROUP_PREFIX = "ladder_"


class UprobeUnavailable(LadderError):
    pass


def find_tracefs(candidates: Iterable[str] = TRACEFS_CANDIDATES) -> Path:
    """The tracefs directory with a writable uprobe_events, or a reason why there is none."""
    reasons = []
    for c in candidates:
        events = Path(c) / "uprobe_events"
        if not events.exists():
            reasons.append(f"{events} missing" + (" (tracefs not mounted: as root, mount -t "
                                                  "tracefs nodev /sys/kernel/tracing)"
                                                  if not (Path(c) / "trace").exists() else ""))
            continue
        if not os.access(events, os.W_OK):
            reasons.append(f"no permission to write {events} (needs root, or CAP_SYS_ADMIN and "
                           "tracefs write access)")
            continue
        return Path(c)
    raise UprobeUnavailable("uprobes unavailable: " + "; ".join(reasons))


PROFILE_LINE = re.compile(r"^\s*(?P<path>\S+)\s+(?P<event>\S+)\s+(?P<hits>\d+)\s*$")


def parse_profile(text: str, prefix: str) -> dict[str, int]:
    """event name -> hits, for events whose name starts with ``prefix``."""
    out = {}
    for line in text.splitlines():
        m = PROFILE_LINE.match(line)
        if m and m.group("event").startswith(prefix):
            out[m.group("event")] = int(m.group("hits"))
    return out


class UprobeSession:
    """``with UprobeSession(probes) as s: before = s.snapshot(); run(); s.delta(before)``"""

    def __init__(self, probes: list[Probe], tracefs: Path | None = None) -> None:
        self.tracefs = tracefs or find_tracefs()
        self.group = f"{GROUP_PREFIX}{os.getpid()}"
        self.prefix = f"l{os.getpid()}_"
        self.probes = [p for p in probes if p.offset is not None]
        self.event_of: dict[str, str] = {}
        self.rejected: dict[str, str] = {}
        self.setup_s = 0.0
        self.teardown_s = 0.0
        self._fd: int | None = None
        self._enabled = False

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> "UprobeSession":
        start = time.monotonic()
        remove_stale_groups(self.tracefs)
        self._fd = os.open(self.tracefs / "uprobe_events", os.O_WRONLY | os.O_APPEND)
        try:
            for p in self.probes:
                if any(c.isspace() for c in p.module):
                    self.rejected[p.id] = f"path with whitespace: {p.module!r}"
                    continue
                event = f"{self.prefix}{p.id}"
                try:
                    os.write(self._fd, f"p:{self.group}/{event} {p.module}:{p.offset:#x}\n".encode())
                except OSError as exc:
                    self.rejected[p.id] = f"uprobe_events refused it: {os.strerror(exc.errno or 0)}"
                    continue
                self.event_of[p.id] = event
            if self.event_of:
                (self.tracefs / "events" / self.group / "enable").write_text("1")
                self._enabled = True
        except BaseException:
            self.close()
            raise
        self.setup_s = time.monotonic() - start
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        start = time.monotonic()
        try:
            if self._enabled:
                (self.tracefs / "events" / self.group / "enable").write_text("0")
                self._enabled = False
            if self._fd is not None and self.event_of:
                _delete_group(self._fd, self.group)
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.teardown_s = time.monotonic() - start

    # -- counts -----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, int]:
        return parse_profile((self.tracefs / "uprobe_profile").read_text(), self.prefix)

    def delta(self, before: dict[str, int]) -> dict[str, int]:
        """probe id -> hits since ``before``."""
        after = self.snapshot()
        return {pid: after.get(ev, 0) - before.get(ev, 0) for pid, ev in self.event_of.items()}


def _delete_group(fd: int, group: str) -> None:
    try:
        os.write(fd, f"-:{group}/\n".encode())
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise


def remove_stale_groups(tracefs: Path) -> list[str]:
    """Disable and delete ``ladder_<pid>`` groups whose process is gone."""
    removed: list[str] = []
    events_dir = tracefs / "events"
    if not events_dir.is_dir():
        return removed
    for d in events_dir.glob(f"{GROUP_PREFIX}*"):
        pid = d.name[len(GROUP_PREFIX):]
        if pid.isdigit() and Path(f"/proc/{pid}").exists():
            continue
        try:
            (d / "enable").write_text("0")
            fd = os.open(tracefs / "uprobe_events", os.O_WRONLY | os.O_APPEND)
            try:
                _delete_group(fd, d.name)
            finally:
                os.close(fd)
            removed.append(d.name)
        except OSError:
            pass
    return removed
