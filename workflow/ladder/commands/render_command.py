"""``ladder render [ladder.json] [--out DIR]``: re-render a report from kept results, running
nothing. The work is ``ladder.reporting.render``'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ladder.reporting.render import cli, render_all
from ladder.reporting import render as _work

DESCRIPTION = (_work.__doc__ or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ladder render", description=DESCRIPTION)
    ap.add_argument("report_json", nargs="?", default="results/hosts/local/report/ladder.json")
    ap.add_argument("--out", default=None, help="output directory (default: beside the JSON)")
    ap.add_argument("--workdir", default=".", help="directory the result paths are relative to")
    args = ap.parse_args(argv)
    return cli("ladder render", lambda: render_all(
        args.report_json, args.out or Path(args.report_json).parent, args.workdir))


if __name__ == "__main__":
    sys.exit(main())
