"""The run's measuring budget (issue 56): ``measure.budget`` wall minutes for a host's bench
cells, spent where the answers are still open.

A cell measures until every comparison in it is decided (the anytime-valid design,
``ladder.planning.sequential``), the design's maximum, or its allowance. The allowance is what
is left of the budget shared by the cells still to be measured: (budget - what this run's
finished cells spent) / (cells planned - cells finished). A cell whose comparisons are decided
early (the floor's 16x step, a clear vendor step) leaves its unspent time to the cells after
it; the first cell gets the even share. The finished cells of a run are read from a ledger,
one line per cell, under ``logs/budget/<run>/<host>.jsonl`` (the run: ``LADDER_RUN_ID``, set
once by the Snakefile for every job of one invocation); without a run identity each cell gets
the even share.

The budget is not part of a cell's identity: changing it, or adding a cell, re-measures
nothing. A cell that stopped on its budget says so (its report gives the budget that would
decide its open comparisons at the measured noise); ``--forcerun`` it to measure it again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

RUN_ENV = "LADDER_RUN_ID"
LEDGER_DIR = Path("logs") / "budget"


def new_run_id() -> str:
    """A fresh run identity: the UTC time and the planning process's id."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"


def ledger_path(host: str, run_id: str | None = None, root: str | os.PathLike[str] = "."
                ) -> Path | None:
    """The ledger of ``host``'s cells in this run (None: no run identity)."""
    run = run_id if run_id is not None else os.environ.get(RUN_ENV)
    if not run:
        return None
    return Path(root) / LEDGER_DIR / run / f"{host}.jsonl"


def read_ledger(path: Path | None) -> list[dict[str, Any]]:
    """The finished cells of a run (a torn last line, from a job killed while writing it, is
    left out)."""
    if path is None or not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def allowance(budget_s: float | None, cells: int, cell: str,
              ledger: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A cell's allowance in seconds and how it was reached: what the run's finished cells
    (other than this one) left of ``budget_s``, shared by the cells still to measure (this one
    included). None: no budget."""
    if budget_s is None:
        return None
    done = {str(e["cell"]): float(e["spent_s"]) for e in ledger if str(e["cell"]) != cell}
    left = max(0.0, float(budget_s) - sum(done.values()))
    remaining = max(1, int(cells) - len(done))
    return {"budget_s": float(budget_s), "cells": int(cells), "finished": len(done),
            "spent_by_finished_s": round(sum(done.values()), 3),
            "allowance_s": round(left / remaining, 3)}


def record(path: Path | None, cell: str, spent_s: float, allowance_s: float | None,
           stopped: str | None) -> None:
    """Append a finished cell to the run's ledger (one line, written in one call: appends of
    whole lines do not interleave)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"cell": cell, "spent_s": round(spent_s, 3), "allowance_s": allowance_s,
                       "stopped": stopped}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
