"""``ladder bisect --repo URL --good SHA --bad SHA --rung R --quant Q --workload W --threads N``:
the commit that moved one cell. The work is ``ladder.reporting.bisect``'s."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ladder.core.errors import LadderError
from ladder.planning.targets import load_config
from ladder.reporting.bisect import ROOT, Bisection, render
from ladder.reporting import bisect as _work

DESCRIPTION = (_work.__doc__ or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ladder bisect", description=DESCRIPTION)
    ap.add_argument("--repo", required=True, help="the git repository (any URL git clones)")
    ap.add_argument("--good", required=True, help="the commit on the good side (any ref)")
    ap.add_argument("--bad", required=True, help="the commit on the bad side, a descendant")
    ap.add_argument("--subdirectory", default="", help="the llama.cpp tree inside the repo")
    ap.add_argument("--rung", required=True, help="the rung whose recipe every probe is built on")
    ap.add_argument("--quant", required=True)
    ap.add_argument("--workload", required=True, help="a measure.workloads entry")
    ap.add_argument("--threads", required=True, type=int)
    ap.add_argument("-d", "--directory", default=".", help="the work dir (as snakemake's -d)")
    ap.add_argument("--configfile", nargs="+", action="extend", default=[])
    ap.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE")
    ap.add_argument("--cores", default="all")
    ap.add_argument("--walk-anyway", action="store_true",
                    help="walk even when the ends say a step's rounds would not place a probe")
    ap.add_argument("--offline", action="store_true",
                    help="touch no network: use the mirror an earlier bisection left")
    args = ap.parse_args(argv)
    workdir = Path(args.directory).resolve()
    try:
        here = os.getcwd()
        os.chdir(ROOT)  # config/config.yaml, as snakemake reads it
        try:
            config = load_config([str(Path(here, f)) for f in args.configfile], args.config)
        finally:
            os.chdir(here)
        args.configfile = [str(Path(here, f)) for f in args.configfile]
        b = Bisection(args, config, workdir)
        doc = b.run()
    except LadderError as exc:
        print(f"ladder bisect: {exc}", file=sys.stderr)
        return 1
    print(render(doc))  # written after every step (Bisection.save)
    return 1 if doc["result"] == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
