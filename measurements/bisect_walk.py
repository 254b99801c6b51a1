"""A real ``ladder bisect`` walk, timed (issue 61's target): a script that prints figures, not
a test.

Builds a local git history of ``--commits`` commits from the default source's tree (the
shared resources must hold it: run the workflow once), one of which (``--slow-at``) makes
thread 0 spin ``--micros`` µs after every compute-graph node (tests/histories.py: a moderate
decode step, sized by the spin), every other commit a note in the docs; then runs ``ladder
bisect`` over it with the default config (plus ``--configfile`` overlays) on one cell, and
prints the walk's wall time, each step's wall time and rounds, and the result.

    .venv/bin/python measurements/bisect_walk.py --out DIR \\
        [--commits 8] [--slow-at 5] [--micros 2] [--rung native_repack] [--quant Q4_0] \\
        [--workload tg64] [--threads 2]

Nothing else should run on the machine meanwhile: the walk's steps are measurements.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import histories  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a new folder: the history and the work dir")
    ap.add_argument("--commits", type=int, default=8)
    ap.add_argument("--slow-at", type=int, default=5)
    ap.add_argument("--micros", type=int, default=2, help="the spin per graph node, µs")
    ap.add_argument("--rung", default="native_repack")
    ap.add_argument("--quant", default="Q4_0")
    ap.add_argument("--workload", default="tg64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configfile", nargs="*", default=[])
    ap.add_argument("--config", nargs="*", default=[])
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True)
    repo = histories.spin_history(out / "repo", args.commits, args.slow_at, args.micros)
    shas = subprocess.run(["git", "rev-list", "--reverse", "HEAD"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.split()
    argv = [sys.executable, "-m", "ladder.commands.bisect_command", "--repo", str(repo),
            "--good", shas[0], "--bad", shas[-1], "--rung", args.rung, "--quant", args.quant,
            "--workload", args.workload, "--threads", str(args.threads), "-d", str(out / "work"),
            *(["--configfile", *args.configfile] if args.configfile else []),
            *(["--config", *args.config] if args.config else [])]
    print("$ " + " ".join(argv), flush=True)
    t0 = time.monotonic()
    res = subprocess.run(argv, cwd=ROOT, check=False)
    wall = time.monotonic() - t0
    [found] = (out / "work" / "bisect").glob("*/bisect.json")
    doc = json.loads(found.read_text())
    print(f"\nthe slow commit: index {args.slow_at}, {shas[args.slow_at][:12]} "
          f"(spin {args.micros} µs per node)")
    print(f"the walk: exit {res.returncode}, {wall / 60:.1f} min, result {doc['result']!r}, "
          f"first bad {str(doc.get('first_bad'))[:12]}")
    print("| step | wall s | rounds | over good | bad over it | placed |")
    print("|---|---:|---:|---|---|---|")
    for s in doc["steps"]:
        comp = s.get("vs_good") or s.get("bad_vs_good") or {}
        print(f"| {s['label']} | {s.get('wall_s')} | {comp.get('rounds', '-')} "
              f"| {comp.get('text', '-')} | {(s.get('bad_vs_probe') or {}).get('text', '-')} "
              f"| {s.get('side', '-')} |")
    print(f"\n{doc['text']}")
    if doc.get("expected"):
        print(f"expected before walking: {doc['expected']['text']}")
    return 0 if doc.get("first_bad") == shas[args.slow_at] else 1


if __name__ == "__main__":
    sys.exit(main())
