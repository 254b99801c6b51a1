"""``ladder overlay [--quants ..] [--workloads ppN,tgN] [--rounds N]``: a config overlay (CI's
forms). The work is ``ladder.planning.overlay``'s."""

from __future__ import annotations

import argparse
import sys

import yaml

from ladder.core.errors import LadderError
from ladder.planning.overlay import overlay
from ladder.planning.targets import load_config
from ladder.planning import overlay as _work

DESCRIPTION = (_work.__doc__ or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ladder overlay", description=DESCRIPTION)
    ap.add_argument("--base", action="append", default=[],
                    help="config overlays the run also uses (to switch their workloads off)")
    ap.add_argument("--quants", default="", help="comma list, e.g. Q4_0,Q8_0 (empty: the base's)")
    ap.add_argument("--workloads", default="", help="comma list of ppN / tgN (empty: the base's)")
    ap.add_argument("--rounds", default="", help="measured rounds per cell (empty: the base's)")
    args = ap.parse_args(argv)
    try:
        base = load_config(args.base)
        doc = overlay(base, args.quants.split(",") if args.quants else [],
                      args.workloads.split(",") if args.workloads else [],
                      int(args.rounds) if args.rounds else None)
    except (LadderError, ValueError) as exc:
        print(f"ladder overlay: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False) if doc else "{}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
