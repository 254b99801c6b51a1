"""``ladder compare BASE.json NEW.json [--fail-on ...]``: two runs' reports side by side, each
change judged, and a CI gate (exit 3 when a named gate fails). The work is
``ladder.reporting.compare``'s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ladder.core.errors import LadderError
from ladder.core.io import atomic_write_json, atomic_write_text
from ladder.reporting.compare import GATES, compare, gate, load_report, render
from ladder.reporting import compare as _work

DESCRIPTION = (_work.__doc__ or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ladder compare", description=DESCRIPTION)
    ap.add_argument("base", help="the baseline run's report JSON")
    ap.add_argument("new", help="the new run's report JSON")
    ap.add_argument("--out", default=".", help="where compare.{json,md,html} go")
    ap.add_argument("--fail-on", default="", help=f"comma list of {', '.join(GATES)}")
    ap.add_argument("--confidence", type=float, default=0.95)
    args = ap.parse_args(argv)
    try:
        fail_on = [g for g in args.fail_on.split(",") if g]
        result = compare(load_report(args.base), load_report(args.new), args.confidence)
        failed = gate(result, fail_on)
        md, html = render(result)
        out = Path(args.out)
        atomic_write_json(out / "compare.json", result)
        atomic_write_text(out / "compare.md", md)
        atomic_write_text(out / "compare.html", html)
    except LadderError as exc:
        print(f"ladder compare: {exc}", file=sys.stderr)
        return 1
    print(md)
    if failed:
        print("ladder compare: gate failed:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
