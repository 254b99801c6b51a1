"""``ladder paths {build|measure} RUNG [--host H]``: a rung's files, for ``--forcerun``. The
work is ``ladder.planning.targets``'s."""

from __future__ import annotations

import argparse
import sys

from ladder.core.errors import LadderError
from ladder.planning.targets import host_plans, load_config, rung_paths
from ladder.planning import targets as _work

DESCRIPTION = (_work.__doc__ or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ladder paths", description=DESCRIPTION)
    ap.add_argument("kind", choices=["build", "measure"])
    ap.add_argument("rung")
    ap.add_argument("--host", action="append", default=[], help="only this host (repeatable)")
    ap.add_argument("--configfile", action="append", default=[],
                    help="config overlays, as given to snakemake")
    ap.add_argument("--config", nargs="+", default=[], metavar="KEY=VALUE",
                    help="config values, as given to snakemake (e.g. resources_dir=/shared)")
    args = ap.parse_args(argv)
    try:
        config = load_config(args.configfile, args.config)
        for p in rung_paths(args.kind, args.rung, host_plans(config, args.host)):
            print(p)
    except LadderError as exc:
        print(f"ladder paths: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
