"""A/A runs (issue 18's targets): the real workflow's bench cells with two labels of one build
plus the control, so every difference it finds is noise. Prints per cell the smallest effect it
calls with 80 % power (from its control/twin spread), what it said of b over a (a call is a
false call: at most the nominal 5 % of cells), the smallest effect that comparison calls, how
many rounds it took and how many it re-measured. A measurement that prints figures, not a test.

    .venv/bin/python measurements/aa.py --workdir /tmp/aa --resources resources
    .venv/bin/python measurements/aa.py --workdir /tmp/aa-hog --resources resources \
        --hog-after 60 --hog-for 240        # a CPU hog competes for part of the run

The labels get the recipe of ``--rung`` (native_repack by default) from the config's ladder for
this machine's arch; equal recipes have one build key, so all three labels run one binary.
``--overlay FILE`` adds config overlays (e.g. the measurement settings under test); further
Snakemake arguments after ``--`` go to Snakemake as given. The workdir keeps every raw
llama-bench output and the run's log.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from ladder.core import paths
from ladder.analysis import stats

LADDER, CONTROL = ["a", "b"], "control"


def overlay(base: dict[str, Any], arch: str, rung: str) -> dict[str, Any]:
    """The A/A ladder: labels a and b (and the control, the twin of a) of one recipe."""
    lad = base["ladders"][arch]
    src = next((r for r in lad["rungs"] if r["name"] == rung), None)
    if src is None:
        raise SystemExit(f"--rung {rung}: not a rung of ladders.{arch} "
                         f"({', '.join(r['name'] for r in lad['rungs'])})")
    labels = [{**copy.deepcopy(src), "name": n, "label": f"{rung}, label {n}"} for n in LADDER]
    return {"ladder": "aa",
            "ladders": {"aa": {"quantizer": lad["quantizer"],
                               "control": {"name": CONTROL, "twin": "a"}, "rungs": labels}}}


def judge(workdir: Path, confidence: float) -> list[dict[str, Any]]:
    """Each cell judged as the report judges it (one Benjamini-Hochberg family for the run)."""
    docs, cells = [], []
    for f in sorted((workdir / "results").rglob("t*.json")):
        fields = paths.match("bench", str(f))
        if not fields:
            continue
        doc = json.loads(f.read_text())
        docs.append(doc)
        cells.append(stats.summarize_cell(doc, LADDER, CONTROL, "a", confidence))
    stats.fdr_adjust(cells, confidence)
    rows = []
    for doc, cell in zip(docs, cells):
        step = cell["steps"][0] if cell["steps"] else None
        rows.append({
            "cell": f"{doc['quant']} {doc['workload']} t{doc['threads']}",
            "floor": cell["noise_floor"]["floor"],
            "control_check": cell["noise_floor"]["control_check"]["passed"],
            "call": step["verdict"]["call"] if step else None,
            "text": step["verdict"]["text"] if step else None,
            "resolving_power": step["verdict"]["resolving_power"] if step else None,
            "rounds": doc["rounds"], "remeasured": cell["disturbance"]["remeasured"],
            "unresolved": cell["disturbance"]["unresolved"],
            "retired": (doc.get("retire") or {}).get("retired"),
            "round_statistic": cell["round_statistic"],
            "repetitions": doc.get("repetitions"),
        })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--resources", required=True, help="resources_dir (builds, models) to share")
    ap.add_argument("--configfile", default=str(ROOT / "config" / "config.yaml"))
    ap.add_argument("--overlay", action="append", default=[],
                    help="a config overlay applied after the base (repeatable)")
    ap.add_argument("--rung", default="native_repack")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--hog-after", type=float, default=None,
                    help="start a one-core CPU hog this many seconds into the run")
    ap.add_argument("--hog-for", type=float, default=240)
    ap.add_argument("--judge-only", action="store_true", help="only read an earlier run")
    ap.add_argument("snakemake", nargs="*", help="more Snakemake arguments (after --)")
    a = ap.parse_args()
    work = Path(a.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if not a.judge_only:
        base = yaml.safe_load(Path(a.configfile).read_text())
        ov = work / "aa.yaml"
        ov.write_text(yaml.safe_dump(overlay(base, platform.machine(), a.rung), sort_keys=False))
        # the targets first: --configfile and --config take every value that follows them
        argv = [str(ROOT / "ladder"), "run", "report", "--until", "bench", "-d", str(work),
                *a.snakemake, "--configfile", a.configfile,
                *[str(Path(o).resolve()) for o in a.overlay], str(ov),
                "--config", f"resources_dir={Path(a.resources).resolve()}"]
        print("$", " ".join(argv), flush=True)
        start = time.monotonic()
        with open(work / "aa.log", "w") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            hog = None
            while proc.poll() is None:
                t = time.monotonic() - start
                if a.hog_after is not None and hog is None and t >= a.hog_after:
                    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    print(f"hog started at {t:.0f} s", flush=True)
                if hog is not None and hog.poll() is None and t >= a.hog_after + a.hog_for:
                    hog.kill()
                    print(f"hog stopped at {t:.0f} s", flush=True)
                time.sleep(1)
            if hog is not None and hog.poll() is None:
                hog.kill()
        print(f"run: exit {proc.returncode} after {time.monotonic() - start:.0f} s "
              f"(log {work / 'aa.log'})", flush=True)
        if proc.returncode:
            raise SystemExit(proc.returncode)
    rows = judge(work, a.confidence)
    for r in rows:
        floor = "-" if r["floor"] is None else f"±{r['floor'] * 100:.1f} %"  # 80 % power
        rp = "-" if r["resolving_power"] is None else f"±{r['resolving_power'] * 100:.1f} %"
        print(f"{r['cell']:<22} cell calls {floor:>9}  b/a: {r['call']:<14} b/a calls {rp:>9}  "
              f"rounds {r['rounds']}, re-measured "
              f"{r['remeasured']}{', UNRESOLVED ' + str(r['unresolved']) if r['unresolved'] else ''}"
              f"  [{r['repetitions']} reps, {r['round_statistic']}]")
    called = [r for r in rows if r["call"] in ("faster", "slower")]
    failed = [r for r in rows if r["control_check"] is False]
    print(f"{len(rows)} cells; b called faster/slower than a in {len(called)}; "
          f"control check failed in {len(failed)} (a failed check widens, never hides)")
    (work / "aa.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
