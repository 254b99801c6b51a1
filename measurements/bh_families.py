"""How often null comparisons above the floor are called when the run's comparisons form one
Benjamini-Hochberg family, and when the comparisons with the floor form a family of their own:
a simulation that prints figures, not a test.

Each simulated run has ``--cells`` cells of rungs a (the floor), b (``--gross`` x a) and c (b's
speed: the null), plus a control of b, ``--rounds`` paired rounds with ``--sd`` log-normal noise
per run, judged by ``stats.summarize_cell`` and ``stats.fdr_adjust`` as the report does.

    .venv/bin/python measurements/bh_families.py --runs 150
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from ladder.analysis import stats


def cell_doc(rng: np.random.Generator, speeds: dict[str, float], rounds: int,
             sd: float) -> dict[str, Any]:
    samples = []
    for rnd in range(rounds):
        order = list(speeds)
        rng.shuffle(order)
        drift = rng.normal(0, sd)  # a round's drift hits every rung alike
        for pos, name in enumerate(order):
            samples.append({"rung": name, "round": rnd, "order": pos, "build_key": name,
                            "tokens_per_s": float(50 * speeds[name]
                                                  * np.exp(drift + rng.normal(0, sd)))})
    return {"quant": "q", "workload": "tg64", "threads": 2, "samples": samples,
            "workload_spec": {"n_prompt": 0, "n_gen": 64}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=150)
    ap.add_argument("--cells", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--sd", type=float, default=0.05)
    ap.add_argument("--gross", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    called = {"one family": 0, "two families": 0}
    nulls = 0
    for _ in range(args.runs):
        speeds = {"a": 1.0, "b": args.gross, "c": args.gross, "control": args.gross}
        cells = [stats.summarize_cell(cell_doc(rng, speeds, args.rounds, args.sd),
                                      ["a", "b", "c"], "control", "b", resamples=50)
                 for _ in range(args.cells)]
        one = copy.deepcopy(cells)
        stats.fdr_adjust(one)
        stats.fdr_adjust(cells, floor="a")
        for name, cs in (("one family", one), ("two families", cells)):
            called[name] += sum(s["verdict"]["significant"] for c in cs for s in c["steps"]
                                if s["base"] == "b")
        nulls += args.cells
    print(f"{args.runs} runs x {args.cells} cells, {args.rounds} rounds, SD {args.sd:g}, floor "
          f"steps {args.gross:g}x; null comparisons above the floor: {nulls}")
    for name, n in called.items():
        print(f"  {name}: {n} significant ({100 * n / nulls:.1f} %)")


if __name__ == "__main__":
    main()
