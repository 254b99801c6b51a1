"""A killed run resumes with one command: ``./ladder run`` clears a stale Snakemake lock.

    ladder run [snakemake args...]   (ladder.commands.unlock_command, then snakemake)

Snakemake locks a work directory (``.snakemake/locks/*.lock``) for the length of a run and
removes the lock when it ends. A run killed with SIGKILL (or a lost machine) leaves it behind,
and the next run stops with ``LockException``. A lock is stale when no live Snakemake process
works in that directory; only then is it removed (what ``snakemake --unlock`` does), and the
run says so. A lock that a live run holds is never touched: the command stops and names the run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence


def workdir_of(args: Sequence[str], cwd: str | os.PathLike[str] = ".") -> Path:
    """The work directory a snakemake command line runs in (``-d``/``--directory``)."""
    for i, a in enumerate(args):
        if a in ("-d", "--directory") and i + 1 < len(args):
            return Path(cwd, args[i + 1]).resolve()
        if a.startswith("--directory="):
            return Path(cwd, a.split("=", 1)[1]).resolve()
    return Path(cwd).resolve()


def _snakemake_runs() -> Iterable[tuple[int, Path]]:
    """(pid, work dir) of every live snakemake process on this machine (Linux /proc)."""
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        if pid == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace")
                    for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            if not any(Path(a).name == "snakemake" or a == "snakemake" for a in argv[:3]):
                continue
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield pid, workdir_of(argv[1:], cwd)


def live_holders(workdir: Path) -> list[int]:
    return sorted(pid for pid, wd in _snakemake_runs() if wd == workdir.resolve())


def clear_stale_lock(workdir: Path) -> tuple[str, list[Path], list[int]]:
    """('none' | 'stale' | 'held', lock files, holders' pids). A stale lock is removed; a held
    one is kept."""
    locks = sorted((workdir / ".snakemake" / "locks").glob("*.lock"))
    if not locks:
        return "none", [], []
    holders = live_holders(workdir)
    if holders:
        return "held", locks, holders
    for f in locks:
        f.unlink(missing_ok=True)
    return "stale", locks, []
