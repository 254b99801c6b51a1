"""``ladder run``'s first step: clear a stale Snakemake lock a killed run left (never one a
live run holds). The work is ``ladder.core.locks``'s."""

from __future__ import annotations

import sys
from typing import Sequence

from ladder.core.locks import clear_stale_lock, workdir_of


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--unlock" in args or "--nolock" in args:
        return 0
    workdir = workdir_of(args)
    state, locks, holders = clear_stale_lock(workdir)
    if state == "stale":
        print(f"ladder: {workdir} was locked by a run that is gone (killed, or its machine "
              f"lost); no snakemake process works there now, so the stale lock "
              f"({', '.join(p.name for p in locks)}) was removed. Jobs the killed run left "
              "incomplete are run again; finished results are kept.", file=sys.stderr)
    elif state == "held":
        pids = ", ".join(map(str, holders))
        print(f"ladder: {workdir} is locked by a running snakemake (pid {pids}); wait for it "
              "to end, or stop it, before starting another run here.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
