"""Which run-level dependence estimator (issue 42): a simulation that prints figures, not a test.

Runs of ``--cells`` cells of ``--rounds`` steady A/A rounds (per-round SD 6 % of the log
ratio), the control's rounds carrying extra noise of one kind: none (iid), AR(1) at 0.3 (SD
10 %), slow modes (5 % of processes 35 % slow), or a shift (the label 8 % off for 5
consecutive rounds, once per cell). For each variance-factor estimator, pooled over a run's
cells as ``stats.run_dependence`` pools them, it prints the share of cells whose A/A check (the
95 % t-interval of the mean log ratio, its variance taken ``factor`` times sd²/n) excludes 1 —
nominal 5 % — and the mean factor (its cost when the rounds are independent):

- ``naive``: independent rounds (factor 1), the rule before issue 42;
- ``ar1``: AR(1) from the lag-1 autocorrelation, Kendall's bias correction (r + 1/n)/(1 - 3/n);
- ``lag1``: (1 + 2·r_1) / (1 - 2/n);
- ``lags3``: (1 + 2·(r_1 + r_2 + r_3)) / (1 - 6/n), the one ``stats.run_dependence`` uses.

    .venv/bin/python measurements/dependence_estimators.py --cells 6 --runs 300
    .venv/bin/python measurements/dependence_estimators.py --cells 12 --runs 150
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats as sps

KINDS = ("iid", "ar1", "slow", "shift")


def extra(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "iid":
        return np.zeros(n)
    if kind == "ar1":
        x = np.empty(n)
        x[0] = rng.normal(0, 0.10)
        for i in range(1, n):
            x[i] = 0.3 * x[i - 1] + rng.normal(0, 0.10 * math.sqrt(1 - 0.09))
        return x
    if kind == "slow":
        return np.where(rng.random(n) < 0.05, math.log(0.65), 0.0)
    shift = np.zeros(n)
    start = int(rng.integers(0, n - 5))
    shift[start:start + 5] = math.log(1.08) * rng.choice([-1, 1])
    return shift


def factors(series: list[np.ndarray]) -> dict[str, float]:
    n = float(np.mean([len(x) for x in series]))
    num = np.zeros(4)
    for x in series:
        d = x - x.mean()
        for j in range(4):
            num[j] += float((d[j:] * d[:len(d) - j]).sum())
    r = num[1:] / num[0]
    rho = max(0.0, min(0.9, (r[0] + 1 / n) / (1 - 3 / n)))
    return {"naive": 1.0, "ar1": (1 + rho) / (1 - rho),
            "lag1": max(1.0, (1 + 2 * r[0]) / (1 - 2 / n)),
            "lags3": max(1.0, (1 + 2 * r.sum()) / (1 - 6 / n))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cells", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t = float(sps.t.ppf(0.975, args.rounds - 1))
    print(f"{args.runs} runs of {args.cells} cells x {args.rounds} rounds: A/A checks failed "
          "(nominal 5 %), mean factor")
    for kind in KINDS:
        fails: dict[str, int] = {}
        mean: dict[str, list[float]] = {}
        cells = 0
        for _ in range(args.runs):
            series = [rng.normal(0, 0.06, args.rounds) + extra(kind, args.rounds, rng)
                      for _ in range(args.cells)]
            f = factors(series)
            for name, v in f.items():
                mean.setdefault(name, []).append(v)
            for x in series:
                se = x.std(ddof=1) / math.sqrt(len(x))
                for name, v in f.items():
                    fails[name] = fails.get(name, 0) + (abs(x.mean()) > t * se * math.sqrt(v))
                cells += 1
        print(f"- {kind}: " + "; ".join(f"{name} {fails[name] / cells * 100:.1f} % "
                                        f"(x{np.mean(mean[name]):.2f})" for name in fails))


if __name__ == "__main__":
    main()
