"""Which sequential rule for a comparison (issue 56): today's design against two anytime-valid
ones, on simulated cells of the shape the bench cells have.

A comparison is a series of paired per-round log ratios, looked at after every round from the
third up to a cap. Rules:

- ``today``: Haybittle-Peto looks at rounds 3, 5 and 10 (a gross step, p < 0.001 and beyond δ,
  is decided there), otherwise the fixed-n paired t at the cap: faster/slower when p < 0.05 and
  the estimate beyond δ, equivalent when the 90 % interval is inside ±δ;
- ``tcs``: the anytime-valid t confidence sequence (savvi, Lindon et al. 2024) after every round,
  stopped as soon as it is wholly beyond ±δ or wholly inside it;
- ``gs``: repeated confidence intervals of a group-sequential design (a look after every round
  up to the cap, error spent as α·t², the Kim-DeMets power family: the workflow's design),
  stopped the same way;
- ``obf``: the same with Lan-DeMets O'Brien-Fleming-type spending (the first candidate);
- ``gsf``: ``gs`` with non-binding futility (``sequential.out_of_reach``): after ``--after``
  rounds, an open comparison that would need more than ``--margin`` x cap rounds at the noise
  and effect measured so far is stopped and reported as it stands.

``--futility`` compares ``gs`` and ``gsf`` only, over effects from 0 to twice the target (the
ones near ±δ are where futility saves rounds and where it can cost a decision).

At the cap an open comparison is reported as it stands: a call when the interval excludes 0
("by less than δ not ruled out"), else inconclusive. For each noise model, effect and rule:
the share of cells called (a false call when the effect is 0), decided beyond δ, decided
equivalent, the interval's coverage (at every look up to the stop for the sequential rules, at
the stop for today's), and the mean rounds used. Noise: independent rounds, AR(1) at 0.3, slow
modes (a level that changes every ~8 rounds) and a label shifted by one SD for 5 rounds; the
standard error takes the variance factor the run would measure (the model's long-run factor) or
the one assumed inside a cell today (``--assumed``).

    .venv/bin/python measurements/sequential_rules.py [--cells 4000] [--cap 28]

``--real DIR ...`` replays the same rules on real A/A rounds instead: the per-round log ratios
of two disjoint label pairs of a ``measurements/resolving_power.py`` series (one binary under
four labels), each centred, resampled by moving blocks into cells of the cap's rounds; with no
effect, and at the phase's target effect added to every round.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
from ladder.planning import sequential  # noqa: E402

RHO_ASSUMED = 0.05  # protocol.ASSUMED_RHO: what a cell assumes today


LAGS = 3  # the lags whose autocorrelations the run's factor sums (stats.run_dependence)
# the simulated comparisons: (phase, per-round SD, δ, target effect)
PHASES = (("prefill", 0.18, 0.05, 0.10), ("decode", 0.09, 0.03, 0.05), ("quiet", 0.06, 0.05, 0.10))
FUTILITY = {"enabled": True, "after": 14, "margin": 4.0}  # gsf's (--after, --margin)


def reach(cap: int, alpha: float = 0.05) -> float:
    """min over n <= margin x cap of crit(n)/sqrt(n) (``sequential.rounds_to_decide``'s
    critical values): a comparison is out of reach when its gap to ±δ is under this times its
    per-round SD (dependence included)."""
    limit = int(math.ceil(FUTILITY["margin"] * cap))
    return min((sequential.look_critical(n, cap, alpha) if n <= cap
                else float(sps.t.ppf(1 - alpha / 2, n - 1))) / math.sqrt(n)
               for n in range(sequential.MIN_ROUNDS, limit + 1))


def noise(model: str, cells: int, n: int, sd: float, rng: np.random.Generator
          ) -> tuple[np.ndarray, float]:
    """(cells x n) noise of the per-round log ratio, and the variance factor a run measures
    from its lags 1-``LAGS`` autocorrelations (``--lags``)."""
    z = rng.standard_normal((cells, n))
    if model == "iid":
        return sd * z, 1.0
    if model == "ar1":
        rho = 0.3
        e = np.empty_like(z)
        e[:, 0] = z[:, 0]
        for i in range(1, n):
            e[:, i] = rho * e[:, i - 1] + math.sqrt(1 - rho ** 2) * z[:, i]
        return sd * e, 1 + 2 * sum(rho ** j for j in range(1, LAGS + 1))
    if model == "slow":
        # a level holding 22.5 % of the variance that lasts ~8 rounds (lag-j autocorrelation
        # 0.225 * 0.875^j): the run measures a factor of 2.04 from lags 1-3
        # (stats.run_dependence), what the default run of 2026-12-07 measured in prefill
        share = 0.225
        level = np.zeros((cells, n))
        cur = rng.standard_normal(cells) * math.sqrt(share)
        for i in range(n):
            switch = rng.random(cells) < 1 / 8
            cur = np.where(switch, rng.standard_normal(cells) * math.sqrt(share), cur)
            level[:, i] = cur
        return (sd * (math.sqrt(1 - share) * z + level),
                1 + 2 * sum(share * 0.875 ** j for j in range(1, LAGS + 1)))
    if model == "shift":
        e = sd * z
        start = rng.integers(0, n - 5, cells)
        for c in range(cells):
            e[c, start[c]:start[c] + 5] += sd
        return e, 1.0
    raise ValueError(model)


def run_rule(rule: str, x: np.ndarray, band: float, factor: float, cap: int,
             mu: float) -> dict[str, float]:
    """One rule on cells x (cells x rounds, log ratios whose true mean is ``mu``)."""
    cells, n = x.shape
    k = np.arange(1, n + 1)
    csum = np.cumsum(x, axis=1)
    mean = csum / k
    csq = np.cumsum(x ** 2, axis=1)
    var = np.where(k > 1, (csq - k * mean ** 2) / np.maximum(k - 1, 1), np.nan)
    se = np.sqrt(np.maximum(var, 0) / k * factor)
    stop = np.full(cells, cap)
    decision = np.full(cells, "", dtype=object)
    covered = np.ones(cells, dtype=bool)
    if rule == "today":
        for look in (3, 5, 10):
            i = look - 1
            t = np.abs(mean[:, i]) / se[:, i]
            p = 2 * sps.t.sf(t, look - 1)
            gross = (p < 0.001) & (np.abs(mean[:, i]) >= band) & (decision == "")
            decision[gross] = np.where(mean[gross, i] > 0, "faster", "slower")
            stop[gross] = look
        i = cap - 1
        open_ = decision == ""
        t = np.abs(mean[:, i]) / se[:, i]
        p = 2 * sps.t.sf(t, cap - 1)
        call = open_ & (p < 0.05) & (np.abs(mean[:, i]) >= band)
        decision[call] = np.where(mean[call, i] > 0, "faster", "slower")
        h90 = sps.t.ppf(0.95, cap - 1) * se[:, i]
        eq = open_ & ~call & (mean[:, i] - h90 >= -band) & (mean[:, i] + h90 <= band)
        decision[eq] = "equivalent"
        at = stop - 1
        h = sps.t.ppf(0.975, stop - 1) * se[np.arange(cells), at]
        m = mean[np.arange(cells), at]
        covered = (m - h <= mu) & (mu <= m + h)
        beyond = np.isin(decision, ["faster", "slower"]) & (
            np.abs(m) - h >= band)
        excl0 = np.isin(decision, ["faster", "slower"])
    else:
        radius = np.full((cells, n), np.inf)
        for j in range(sequential.MIN_ROUNDS, n + 1):
            if rule == "tcs":
                crit = sequential.t_radius(j)
            else:
                c = sequential.spending_bounds(
                    cap, rho=None if rule == "obf" else sequential.SPENDING_RHO)[
                    j - sequential.MIN_ROUNDS]
                crit = float(sps.t.ppf(sps.norm.cdf(c), j - 1))
            radius[:, j - 1] = crit * se[:, j - 1]
        lo, hi = mean - radius, mean + radius
        done = np.zeros(cells, dtype=bool)
        futile = np.zeros(cells, dtype=bool)
        c_reach = reach(cap) if rule == "gsf" else 0.0
        for j in range(sequential.MIN_ROUNDS, cap + 1):
            i = j - 1
            covered &= done | ((lo[:, i] <= mu) & (mu <= hi[:, i]))
            up, down = lo[:, i] >= band, hi[:, i] <= -band
            eq = (lo[:, i] >= -band) & (hi[:, i] <= band)
            now = ~done & (up | down | eq)
            decision[now & up] = "faster"
            decision[now & down] = "slower"
            decision[now & eq & ~up & ~down] = "equivalent"
            stop[now] = j
            done |= now
            if rule == "gsf" and j >= FUTILITY["after"]:
                gap = np.abs(np.abs(mean[:, i]) - band)
                out = ~done & (gap < c_reach * se[:, i] * math.sqrt(j))
                futile |= out
                stop[out] = j
                done |= out
        i = cap - 1
        open_ = ~done | futile
        if rule == "gsf":  # reported as it stands at its stop
            at = stop - 1
            lo = lo.copy()
            hi = hi.copy()
            lo[:, i] = np.where(futile, lo[np.arange(cells), at], lo[:, i])
            hi[:, i] = np.where(futile, hi[np.arange(cells), at], hi[:, i])
        excl = open_ & ((lo[:, i] > 0) | (hi[:, i] < 0))
        decision[excl] = np.where(mean[excl, i] > 0, "faster (<δ not ruled out)",
                                  "slower (<δ not ruled out)")
        beyond = np.isin(decision, ["faster", "slower"])
        excl0 = np.array([d.startswith(("faster", "slower")) for d in decision])
    return {"called": float(excl0.mean()), "beyond": float(beyond.mean()),
            "equivalent": float((decision == "equivalent").mean()),
            "coverage": float(covered.mean()), "rounds": float(stop.mean())}


def series_rounds(doc: dict) -> tuple[dict[tuple[str, str], dict[int, dict[str, float]]],
                                      set[tuple[str, str, int]]]:
    """A series' clean samples: (model, workload) -> round -> label -> tokens/s, and the
    (model, workload, round) whose round was disturbed (warmup rounds left out)."""
    groups: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    bad: set[tuple[str, str, int]] = set()
    for smp in doc["samples"]:
        key = (smp["model"], smp["workload"])
        if smp.get("warmup"):
            continue
        if smp.get("disturbed"):
            bad.add((*key, smp["round"]))
        groups.setdefault(key, {}).setdefault(smp["round"], {})[smp["label"]] = \
            float(smp["tokens_per_s"])
    return groups, bad


def real_cells(series_file: Path, cap: int, resamples: int, block: int,
               rng: np.random.Generator) -> list[dict[str, object]]:
    """Real A/A cells from a ``measurements/resolving_power.py`` series: per model and workload,
    the per-round log ratios of two disjoint label pairs (b over a, d over c; one binary, so
    each is centred on 0), resampled by moving blocks of ``block`` rounds into ``resamples``
    cells of ``cap`` rounds each; and the factor the run would measure from them (lags 1-3,
    ``stats.pooled_dependence``)."""
    from ladder.analysis import stats

    groups, bad = series_rounds(json.loads(series_file.read_text()))
    out = []
    for key, rounds in sorted(groups.items()):
        ok = [r for r in sorted(rounds) if (*key, r) not in bad and len(rounds[r]) == 4]
        pairs = []
        for base, other in (("a", "b"), ("c", "d")):
            x = np.log([rounds[r][other] / rounds[r][base] for r in ok])
            pairs.append(x - x.mean())
        factor = stats.pooled_dependence([list(p) for p in pairs])["factor"]
        cells = []
        for x in pairs:
            starts = rng.integers(0, len(x) - block + 1, (resamples, -(-cap // block)))
            idx = (starts[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, :cap]
            cells.append(x[idx])
        phase = "decode" if key[1].startswith("tg") else "prefill"
        out.append({"key": key, "phase": phase, "rounds": len(ok), "factor": factor,
                    "sd": float(np.std(np.concatenate(pairs), ddof=1)),
                    "cells": np.concatenate(cells)})
    return out


def replay(dirs: list[str], cap: int, resamples: int, block: int, seed: int) -> None:
    """The rules on real A/A rounds (false calls and coverage with no effect; the share called
    at the phase's target effect, one label's rounds scaled)."""
    rng = np.random.default_rng(seed)
    print("| series | cell | per-round SD | factor (lags 1-3) | effect | rule | called | beyond δ "
          "| equivalent | coverage | rounds |")
    print("|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for d in dirs:
        for c in real_cells(Path(d) / "series.json", cap, resamples, block, rng):
            delta, target = ((0.05, 0.10) if c["phase"] == "prefill" else (0.03, 0.05))
            band = math.log1p(delta)
            for effect in (0.0, target):
                mu = math.log1p(effect)
                for rule in ("today", "tcs", "gs", "obf"):
                    r = run_rule(rule, c["cells"] + mu, band, float(c["factor"]), cap, mu)
                    print(f"| {Path(d).name} | {c['key'][0]} {c['key'][1]} ({c['rounds']} rounds) "
                          f"| {float(c['sd']) * 100:.1f} % | {float(c['factor']):.2f} "
                          f"| {effect:+.0%} | {rule} | {r['called']:.1%} | {r['beyond']:.1%} "
                          f"| {r['equivalent']:.1%} | {r['coverage']:.1%} | {r['rounds']:.1f} |")


def direct_cells(series_files: list[Path], cap: int) -> dict[str, dict[str, object]]:
    """Real A/A cells with no resampling: in every series (``resolving_power.py --out``, one
    binary under K labels), each disjoint label pair (b over a, d over c, ...) over its first
    ``cap`` clean rounds is one cell, as measured (not centred: one build cannot differ from
    itself, so the true effect is 0 and any label or position bias stays in). Grouped by phase,
    with the factor the run would measure from them (lags 1-3, ``stats.pooled_dependence``)."""
    from ladder.analysis import stats

    out: dict[str, dict[str, object]] = {}
    for f in series_files:
        doc = json.loads(f.read_text())
        labels = list(doc["labels"])
        groups, bad = series_rounds(doc)
        for key, rounds in sorted(groups.items()):
            ok = [r for r in sorted(rounds)
                  if (*key, r) not in bad and len(rounds[r]) == len(labels)][:cap]
            if len(ok) < cap:
                continue
            phase = "decode" if key[1].startswith("tg") else "prefill"
            g = out.setdefault(phase, {"cells": [], "names": []})
            for a, b in zip(labels[0::2], labels[1::2]):
                g["cells"].append(np.log([rounds[r][b] / rounds[r][a] for r in ok]))
                g["names"].append(f"{f.parent.name}/{key[1]}/{b}:{a}")
    for g in out.values():
        cells = [list(c) for c in g["cells"]]
        g["factor"] = stats.pooled_dependence(cells)["factor"]
        g["cells"] = np.array(g["cells"])
        g["sd"] = float(np.std(g["cells"] - g["cells"].mean(axis=1, keepdims=True), ddof=1))
    return out


def direct(dirs: list[str], cap: int) -> None:
    """The rules on real A/A cells as measured (``direct_cells``): false calls and coverage at
    every look with no effect, and the share called at the phase's target effect (one label's
    rounds scaled); each sequential rule with the factor a cell allows for inside it
    (``measure.sequential.rho`` 0.05) and with the run's measured factor."""
    groups = direct_cells([Path(d) / "series.json" for d in dirs], cap)
    print("| phase | cells | per-round SD | run's factor | effect | rule (factor) | called "
          "| beyond δ | equivalent | coverage | mean rounds |")
    print("|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for phase, g in sorted(groups.items()):
        delta, target = ((0.05, 0.10) if phase == "prefill" else (0.03, 0.05))
        band = math.log1p(delta)
        x = np.asarray(g["cells"])
        for effect in (0.0, target):
            mu = math.log1p(effect)
            for rule, label, factor in (
                    ("today", "today, run's", float(g["factor"])),
                    ("gs", "gs, in-cell 0.05", (1 + RHO_ASSUMED) / (1 - RHO_ASSUMED)),
                    ("gs", "gs, run's", float(g["factor"])),
                    ("tcs", "tcs, run's", float(g["factor"]))):
                r = run_rule(rule, x + mu, band, factor, cap, mu)
                print(f"| {phase} | {len(x)} | {float(g['sd']) * 100:.1f} % "
                      f"| {float(g['factor']):.2f} | {effect:+.0%} | {label} "
                      f"| {r['called']:.1%} | {r['beyond']:.1%} | {r['equivalent']:.1%} "
                      f"| {r['coverage']:.1%} | {r['rounds']:.1f} |")
    print("\nBetween cells: the spread of the A/A cell means against what their standard errors "
          "say (a per-label offset no within-cell dependence estimate sees):\n")
    print("| phase | SD of the cell means | RMS standard error | variance ratio | lags 1-3 factor |")
    print("|---|---:|---:|---:|---:|")
    for phase, g in sorted(groups.items()):
        x = np.asarray(g["cells"])
        sd_means = float(x.mean(axis=1).std(ddof=1))
        rms_se = float(np.sqrt((x.var(axis=1, ddof=1) / x.shape[1]).mean()))
        print(f"| {phase} | {sd_means * 100:.2f} % | {rms_se * 100:.2f} % | "
              f"{(sd_means / rms_se) ** 2:.2f} | {float(g['factor']):.2f} |")
    print("\nThe smallest effect called (faster) in 80 % of the real cells, one label's rounds "
          "scaled, and the mean rounds a comparison took at it:\n")
    print("| phase | rule (factor) | smallest effect called in 80 % | mean rounds there |")
    print("|---|---|---:|---:|")
    grid = [0.01 * k for k in range(1, 61)]
    for phase, g in sorted(groups.items()):
        delta = 0.05 if phase == "prefill" else 0.03
        band = math.log1p(delta)
        x = np.asarray(g["cells"])
        for rule, label, factor in (
                ("today", "today, run's", float(g["factor"])),
                ("gs", "gs, in-cell 0.05", (1 + RHO_ASSUMED) / (1 - RHO_ASSUMED)),
                ("gs", "gs, run's", float(g["factor"]))):
            found = next(((e, r) for e in grid
                          for r in [run_rule(rule, x + math.log1p(e), band, factor, cap,
                                             math.log1p(e))] if r["called"] >= 0.8), None)
            print(f"| {phase} | {label} | "
                  + (f"{found[0]:.0%} | {found[1]['rounds']:.1f} |" if found else "> 60 % | - |"))


def futility_study(cells: int, cap: int, rng: np.random.Generator) -> None:
    """gs against gsf (``FUTILITY``) at effects from 0 to twice the target: share called,
    decided beyond δ, equivalent, coverage and mean rounds."""
    print(f"futility after {FUTILITY['after']} rounds, margin {FUTILITY['margin']:g} x cap "
          f"{cap}\n")
    print("| phase (SD, δ) | noise | effect | gs: called, beyond δ, equivalent, coverage, rounds "
          "| gsf: called, beyond δ, equivalent, coverage, rounds |")
    print("|---|---|---|---|---|")
    for phase, sd, delta, target in PHASES:
        band = math.log1p(delta)
        for model in ("iid", "slow"):
            e, factor = noise(model, cells, cap, sd, rng)
            for effect in (0.0, delta / 2, delta, (delta + target) / 2, target, 2 * target):
                mu = math.log1p(effect)
                got = [run_rule(rule, e + mu, band, factor, cap, mu) for rule in ("gs", "gsf")]
                print(f"| {phase} ({sd:.0%}, {delta:.0%}) | {model} | {effect:+.1%} | " + " | ".join(
                    f"{r['called']:.1%}, {r['beyond']:.1%}, {r['equivalent']:.1%}, "
                    f"{r['coverage']:.1%}, {r['rounds']:.1f}" for r in got) + " |")


def main() -> int:
    global LAGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=4000)
    ap.add_argument("--cap", type=int, default=28)
    ap.add_argument("--assumed", action="store_true",
                    help="the standard error takes today's assumed factor, not the model's")
    ap.add_argument("--seed", type=int, default=56)
    ap.add_argument("--lags", type=int, default=3,
                    help="the lags the run's factor sums (stats.run_dependence: 3)")
    ap.add_argument("--real", nargs="+", default=[],
                    help="replay the rules on real A/A series (resolving_power.py --out DIRs)")
    ap.add_argument("--direct", nargs="+", default=[],
                    help="each disjoint label pair of these real series is one A/A cell, as "
                         "measured (no resampling)")
    ap.add_argument("--futility", action="store_true",
                    help="gs against gs with non-binding futility (gsf), effects 0-2x target")
    ap.add_argument("--after", type=int, default=14)
    ap.add_argument("--margin", type=float, default=4.0)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--block", type=int, default=2)
    args = ap.parse_args()
    LAGS = args.lags
    if args.real:
        replay(args.real, args.cap, args.resamples, args.block, args.seed)
        return 0
    if args.direct:
        direct(args.direct, args.cap)
        return 0
    FUTILITY.update(after=args.after, margin=args.margin)
    rng = np.random.default_rng(args.seed)
    if args.futility:
        futility_study(args.cells, args.cap, rng)
        return 0
    print("| phase (SD, δ) | noise | effect | rule | called | beyond δ | equivalent | coverage "
          "| rounds |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    for phase, sd, delta, target in PHASES:
        band = math.log1p(delta)
        for model in ("iid", "ar1", "slow", "shift"):
            e, factor = noise(model, args.cells, args.cap, sd, rng)
            if args.assumed:
                factor = (1 + RHO_ASSUMED) / (1 - RHO_ASSUMED)
            for effect in (0.0, target, 1.0, 15.0):
                mu = math.log1p(effect)
                for rule in ("today", "tcs", "gs", "obf"):
                    r = run_rule(rule, e + mu, band, factor, args.cap, mu)
                    print(f"| {phase} ({sd:.0%}, {delta:.0%}) | {model} | {effect:+.0%} | {rule} "
                          f"| {r['called']:.1%} | {r['beyond']:.1%} | {r['equivalent']:.1%} "
                          f"| {r['coverage']:.1%} | {r['rounds']:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
