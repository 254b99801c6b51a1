"""What a person at the terminal sees while a long job runs: one line per step (a bench round,
a dispatch cell, a compile step). The plan's size and cost at the start of a run are
``ladder.planning.announce``'s (no measuring rule reaches that one, so editing it re-measures
nothing)."""

from __future__ import annotations

import logging

log = logging.getLogger("ladder.progress")


def step(label: str, done: int, total: int, *details: str) -> None:
    """One progress line, to the terminal and the job's log: ``round 3/6 · native_repack ·
    51.2 tok/s``."""
    log.info(" · ".join([f"{label} {done}/{total}", *details]))
