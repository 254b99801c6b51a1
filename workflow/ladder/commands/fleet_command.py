"""``ladder fleet [ladder.json ...]``: the fleet report from the per-host reports. The work is
``ladder.reporting.fleet``'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ladder.reporting.fleet import write_fleet
from ladder.reporting.render import cli
from ladder.reporting import fleet as _work

DESCRIPTION = (_work.__doc__ or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ladder fleet", description=DESCRIPTION)
    ap.add_argument("reports", nargs="*", help="per-host ladder.json files "
                    "(default: results/hosts/*/report/ladder.json)")
    ap.add_argument("--out", default="results/report", help="output directory")
    args = ap.parse_args(argv)
    reports = args.reports or sorted(str(p) for p in Path("results/hosts").glob("*/report/ladder.json"))
    if not reports:
        print("ladder fleet: no per-host reports found under results/hosts/", file=sys.stderr)
        return 1
    return cli("ladder fleet", lambda: write_fleet(reports, Path(args.out)))


if __name__ == "__main__":
    sys.exit(main())
