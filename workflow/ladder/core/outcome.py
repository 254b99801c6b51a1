"""Facts and moments: what a record kept under a content address may say.

A source, a vendor source, a model, an emulator, a build and a measurement are kept where their
identity puts them, and reused by every later run whose inputs are the same. What they keep must
be a fact about that content: a verified input, a build, a measurement, or a failure that the
content itself decides and that happens again every time (a rung that does not compile with its
recipe, a patch that does not apply, a crash of the binary). Such a failure is kept, keyed by
everything that decided it, and the report says it was not re-tried and how to force a re-try.

A failure of the moment is not a fact about the content: an input that was not there (a path
missing, a download refused, an unreachable host, a file whose sha256 is not the pinned one) or
a job that the environment stopped (killed, out of memory or disk, a timeout). A job that meets
one still writes its record (the run that saw it reports it, and the rest of the ladder runs),
but ``note`` marks it, and the job's adapter leaves a sidecar beside each of its outputs
(``<output>.moment.json``). Before the next run plans its jobs, ``retire`` moves every marked
output (and its sidecar) out of its content address into that run's ``logs/rechecked/``, so the
job runs again and checks the input anew; nothing is deleted. A job that reads a marked output
marks its own outputs too (``derived``): Snakemake never re-makes a missing input of a job whose
outputs exist, so the whole chain from the moment to the targets is retired together and every
job in it runs again.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Iterable, Iterator, Sequence, TypedDict

from snakemake_interface_storage_plugins.io import WILDCARD_REGEX

from ladder.core.io import atomic_write_json

SUFFIX = ".moment.json"
# signals that come from outside the program: the OOM killer and `kill` (SIGKILL), a stop
# from the terminal or the batch system (SIGTERM, SIGINT, SIGHUP); a SIGILL, SIGSEGV or SIGBUS
# is the binary's own and is kept as a fact
OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
# what a compiler or a tool prints when the machine, not the code, stopped it
OUTSIDE_TEXT = re.compile(
    r"No space left on device|Disk quota exceeded|virtual memory exhausted|"
    r"Cannot allocate memory|out of memory|Killed signal terminated program|"
    r"internal compiler error: Killed|std::bad_alloc", re.I)


class Moment(TypedDict):
    """Why a job's outputs hold a failure of the moment (the sidecar's content)."""

    reason: str
    seen_at: str


_noted: list[Moment] | None = None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def note(reason: str) -> None:
    """This job met a failure of the moment (its outputs are checked again next run)."""
    if _noted is not None:
        _noted.append({"reason": reason, "seen_at": now()})


@contextlib.contextmanager
def watch() -> Iterator[list[Moment]]:
    """The moments noted while the block runs (one job's step)."""
    global _noted
    outer, _noted = _noted, []
    try:
        yield _noted
    finally:
        _noted = outer


def of_exit(returncode: int, timed_out: bool, output: str = "") -> str | None:
    """Why a process's end is the environment's (killed from outside, out of memory or disk,
    timed out), or None when it is the program's own (an exit code, a crash of its own)."""
    if timed_out:
        return "timed out"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            sig = None
        if sig in OUTSIDE_SIGNALS:
            return f"killed by {sig.name}" + (" (the OOM killer, or kill -9)"
                                              if sig == signal.SIGKILL else "")
    m = OUTSIDE_TEXT.search(output or "")
    if m:
        return f"the machine ran out ({m.group(0)})"
    return None


MOMENT_REASON = re.compile(r"timed out|killed by SIG(?:KILL|TERM|INT|HUP)\b|" + OUTSIDE_TEXT.pattern,
                           re.I)


def of_reason(reason: str | None) -> bool:
    """Whether a recorded failure's reason (``run.RunResult.failure``, a build's) names a
    failure of the moment."""
    return bool(reason and MOMENT_REASON.search(reason))


def sidecar(output: str | os.PathLike[str]) -> Path:
    return Path(str(output) + SUFFIX)


def mark(outputs: Iterable[str | os.PathLike[str]], moments: Sequence[Moment]) -> list[Path]:
    """Leave a sidecar beside each output file (directories are left alone: a job's file
    output is enough to make it run again)."""
    marked = []
    for out in outputs:
        if Path(out).is_file():
            side = sidecar(out)
            atomic_write_json(side, {"output": str(out), "moments": list(moments)})
            marked.append(side)
    return marked


def reasons(side: Path) -> list[str]:
    """The reasons a sidecar records."""
    try:
        return [m["reason"] for m in json.loads(side.read_text())["moments"]]
    except (OSError, ValueError, KeyError, TypeError):
        return ["(an unreadable sidecar)"]


def derived(inputs: Iterable[str | os.PathLike[str]]) -> list[Moment]:
    """The moments a job inherits from its inputs: one per input that has a sidecar (its
    outputs are then a failure of the moment too, and retired with it)."""
    out: list[Moment] = []
    for inp in inputs:
        side = sidecar(inp)
        if side.is_file():
            out.append({"reason": f"read {inp}, a failure of the moment "
                                  f"({'; '.join(reasons(side))})", "seen_at": now()})
    return out


def clear(outputs: Iterable[str | os.PathLike[str]]) -> None:
    """A job that ran clean leaves no sidecar of an earlier attempt behind."""
    for out in outputs:
        sidecar(out).unlink(missing_ok=True)


def glob_of(pattern: str) -> str:
    """An output pattern's glob: each ``{wildcard}`` (or ``{wildcard,regex}``) as ``*``
    (Snakemake's own wildcard syntax)."""
    return WILDCARD_REGEX.sub("*", pattern)


class Retired(TypedDict):
    output: str
    moved_to: str
    reasons: list[str]


def retire(patterns: Iterable[str], attic: str | os.PathLike[str]) -> list[Retired]:
    """Move every output that matches one of ``patterns`` (Snakemake output patterns,
    relative to the working directory or absolute) and has a sidecar into ``attic``, its
    path kept below it, so its job runs again."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    done: list[Retired] = []
    sides = sorted({side for pattern in patterns for side in glob.glob(glob_of(pattern) + SUFFIX)})
    for side in sides:
        out = side[: -len(SUFFIX)]
        dest = Path(attic, stamp, out.lstrip("/").replace("../", ""))
        dest.parent.mkdir(parents=True, exist_ok=True)
        why = reasons(Path(side))
        if os.path.exists(out):
            shutil.move(out, dest)
        shutil.move(side, str(dest) + SUFFIX)
        done.append({"output": out, "moved_to": str(dest), "reasons": why})
    return done


def describe(retired: Sequence[Retired]) -> list[str]:
    """The lines a run prints for the outputs it checks again."""
    return [f"ladder: checking again (a failure of the moment, not of the content): "
            f"{r['output']}: {'; '.join(r['reasons'])} (kept in {r['moved_to']})"
            for r in retired]


def recheck(output_patterns: Iterable[str], attic: str = "logs/rechecked") -> list[Retired]:
    """Before a run plans: retire the outputs an earlier run marked, and say so."""
    retired = retire(output_patterns, attic)
    for line in describe(retired):
        print(line, file=sys.stderr)
    return retired
