"""The verdicts of a finished run's bench cells under the rule before issue 31 and under today's,
from the same raw samples: a measurement that prints figures, not a test.

- old: the first ``--old-rounds`` measured rounds (the old default measured 5), a step called
  only when its whole 95 % interval lies beyond the reach of the control/twin interval, and
  held back ("not judged") when the control/twin interval excludes 1;
- new: every round, ``stats.summarize_cell`` and the run's Benjamini-Hochberg step, as the
  report judges them.

    .venv/bin/python measurements/rejudge.py results/hosts/local/bench
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from ladder.analysis import stats, wording


def old_rule(doc: dict[str, Any], base: str, other: str, control: str, twin: str,
             rounds: int) -> str:
    keep = {s["round"] for s in doc["samples"] if not s.get("warmup")}
    first = sorted(keep)[:rounds]
    samples = [s for s in doc["samples"] if s["round"] in first and not s.get("warmup")
               and not s.get("disturbed")]
    r = stats.ratio_ci(stats.paired_ratios(samples, base, other))
    ct = stats.ratio_ci(stats.paired_ratios(samples, twin, control))
    if r.n < 3 or ct.lo is None or r.lo is None:
        return f"insufficient data ({r.n} rounds)"
    if ct.lo > 1 or ct.hi < 1:  # type: ignore[operator]
        return "not judged (control check failed)"
    band = max(abs(math.log(ct.lo)), abs(math.log(ct.hi)))  # type: ignore[arg-type]
    lo, hi = math.log(r.lo), math.log(r.hi)  # type: ignore[arg-type]
    floor = f"floor ±{math.expm1(band) * 100:.1f} %"
    if lo > band or hi < -band:
        return f"{wording.fmt_ratio(r.estimate)} {'faster' if lo > 0 else 'slower'} ({floor})"  # type: ignore[arg-type]
    if -band <= lo and hi <= band:
        return f"within noise ({floor})"
    return f"cannot tell ({floor})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench_dir", help="a host's results/hosts/<host>/bench folder")
    ap.add_argument("--ladder", default="floor,native_repack,amx")
    ap.add_argument("--control", default="control")
    ap.add_argument("--twin", default="native_repack")
    ap.add_argument("--old-rounds", type=int, default=5)
    a = ap.parse_args()
    ladder = a.ladder.split(",")
    docs = [json.loads(p.read_text()) for p in sorted(Path(a.bench_dir).rglob("t*.json"))]
    cells = [stats.summarize_cell(d, ladder, a.control, a.twin, resamples=200) for d in docs]
    fdr = stats.fdr_adjust(cells)
    print(fdr["text"])
    for doc, cell in zip(docs, cells):
        nf = cell["noise_floor"]
        print(f"\n{doc['quant']} {doc['workload']} t{doc['threads']}: {nf['text']}; "
              f"{nf['control_check']['text']}; retired {(doc.get('retire') or {}).get('retired')}")
        for step in cell["steps"]:
            old = old_rule(doc, step["base"], step["rung"], a.control, a.twin, a.old_rounds)
            print(f"  {step['rung']} over {step['base']}: old ({a.old_rounds} rounds): {old}")
            print(f"  {' ' * len(step['rung'] + step['base'])}       new ({step['ratio']['n']} "
                  f"rounds): {step['verdict']['text']}")
        ct = nf["control_vs_twin"]
        if ct:
            v = stats.verdict(stats.RatioEstimate(**ct), nf["threshold"])
            print(f"  A/A control over its twin, judged as a comparison: {v.call}")


if __name__ == "__main__":
    main()
