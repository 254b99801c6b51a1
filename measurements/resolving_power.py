"""Resolving power on real A/A data (issue 31): which estimator and rule ladder uses, their
false-call rates and power curves, measured here. A measurement that prints figures, not a test.

**Measure** (``--out DIR`` with ``--bin-dir`` and ``--model``): one llama-bench binary under K
labels (default a, b, c, d), every label once per round in a fresh shuffled order, for each
model x workload, on the cell's fixed CPU set (``--cpus``, as the workflow places a cell). Every
process's raw JSON and its CPU placement are kept under DIR; ``series.json`` holds the samples.

**Analyse** (``--analyse DIR``, also after measuring): one build cannot differ from itself, so
every call a rule makes between two labels is a false call. From the real rounds:

- false-call rate of each rule at ``--rounds`` rounds, by a moving-block bootstrap over rounds
  (blocks of ``--block`` consecutive rounds keep slow drifts), ``--resamples`` cells per series;
- power: one label's real rounds scaled by 1 + e (the rest of the data as measured), the share
  of cells called faster, for each e in ``--effects``; and the smallest e called in 80 %.

The rules (``--threshold`` δ per phase, 5 % level):

- ``old``: ladder's rule before issue 31: the comparison's 95 % interval must lie wholly beyond
  the band given by the reach of the control/twin interval (labels c and d);
- ``t``: mean of the log ratios, paired t-test and interval (the rule ladder now uses);
- ``hl``: Hodges-Lehmann estimate, Wilcoxon signed-rank test, its normal-approximation interval;
- ``trim``: 20 % trimmed mean of the log ratios with Yuen's winsorized standard error;
- ``best2``: a rung's round is the faster of two processes (labels a, c against b, d), then
  ``t``; it costs twice the processes, so it is also shown at half the rounds (equal time);
- ``t2s`` (``--two-stage PILOT,MIN,MAX``): ``t`` at rounds chosen per cell as the workflow's
  ``measure.rounds_from_noise`` chooses them (``protocol.plan_rounds``): after PILOT rounds the
  per-round SD of an A/A pair (c over a, sharing a as the control shares its twin), at its
  upper ``--assurance`` confidence limit (0.5: as measured), sets the rounds that call
  ``--target`` with 80 % power, within MIN-MAX (``--sequential``: the variant not taken, the
  SD re-estimated after every round). Printed with the rounds it chose (mean, range, share at
  the cap) and the share of cells whose own smallest callable effect at those rounds (from the
  same pair, as the report prints it) met the target.

``--unpinned-labels c,d`` runs those labels without a CPU set: the analysis then prints the
per-round spread of the pinned pair (a, b) beside the unpinned pair (c, d), which matters on a
host with spare CPUs (on a 2-CPU VM a 2-thread set is the whole machine).

    .venv/bin/python measurements/resolving_power.py --out /tmp/rp \\
        --bin-dir resources/builds/<key>/build/bin --model resources/models/.../q4_0.gguf \\
        --model resources/models/.../q8_0.gguf --workloads pp32,pp128,tg64 --rounds-measured 24
    .venv/bin/python measurements/resolving_power.py --analyse /tmp/rp --rounds 12
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from ladder.core import parse
from ladder.planning import protocol
from ladder.analysis import stats
from ladder.measuring.llama_bench import bench_argv
from ladder.measuring.harness import check_placement, disturbed
from ladder.planning.config import schema_defaults
from ladder.core.io import atomic_write_json, atomic_write_text
from ladder.core.machine import cpu_set
from ladder.core.run import run

DISTURBANCE = schema_defaults(Path(__file__).resolve().parents[1] / "workflow" / "schemas"
                              / "config.schema.yaml", "measure")["disturbance"]

WORKLOADS = {"pp32": {"n_prompt": 32, "n_gen": 0}, "pp128": {"n_prompt": 128, "n_gen": 0},
             "tg64": {"n_prompt": 0, "n_gen": 64}, "pp16": {"n_prompt": 16, "n_gen": 0},
             "tg16": {"n_prompt": 0, "n_gen": 16}}
ALPHA = 0.05


# --- measuring -----------------------------------------------------------------------------------
def measure(a: argparse.Namespace) -> Path:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    labels = [chr(ord("a") + i) for i in range(a.labels)]
    cpus = cpu_set(a.threads, a.cpus)
    rng = random.Random(a.seed)
    samples: list[dict[str, Any]] = []
    series_file = out / "series.json"
    for rnd in range(a.rounds_measured + 1):  # round 0: warmup, kept and flagged
        for model in a.model:
            for wl_name in a.workloads.split(","):
                order = labels[:]
                rng.shuffle(order)
                for pos, label in enumerate(order):
                    stem = out / "raw" / f"{Path(model).stem}-{wl_name}-r{rnd:02d}-{pos}-{label}"
                    stem.parent.mkdir(parents=True, exist_ok=True)
                    argv = bench_argv(a.bin_dir, model, WORKLOADS[wl_name], a.threads, a.reps,
                                      True, [])
                    where = None if label in a.unpinned_labels else cpus
                    res = run(argv, timeout_s=1800, cpus=where)
                    atomic_write_text(f"{stem}.json", res.stdout)
                    if not res.ok:
                        raise SystemExit(f"{stem}: llama-bench failed: {res.failure()}")
                    check_placement(res.cpus_seen, where, str(stem))
                    rec = parse.bench_records(res.stdout, f"{stem}.json")[0]
                    samples.append({
                        "model": Path(model).name, "workload": wl_name, "round": rnd,
                        "order": pos, "label": label, "warmup": rnd == 0,
                        "tokens_per_s": float(np.mean(rec["samples_ts"])),
                        "samples_ts": rec["samples_ts"], "wall_s": round(res.wall_s, 3),
                        "cpus": where, "cpus_seen": res.cpus_seen,
                        "disturbed": disturbed(res.machine, DISTURBANCE),
                        "machine": res.machine})
        atomic_write_json(series_file, {"labels": labels, "threads": a.threads, "cpus": cpus,
                                        "unpinned_labels": a.unpinned_labels,
                                        "reps": a.reps, "bin_dir": a.bin_dir,
                                        "samples": samples})
        print(f"round {rnd}/{a.rounds_measured} done", flush=True)
    return out


# --- rules on per-round log ratios ---------------------------------------------------------------
def _call(est: float, lo: float, hi: float, lo90: float, hi90: float, p: float,
          band: float) -> str:
    if p <= ALPHA and abs(est) >= band:
        return "faster" if est > 0 else "slower"
    if -band <= lo90 and hi90 <= band:
        return "equivalent"
    return "inconclusive"


def rule_t(x: np.ndarray, band: float, _ct: np.ndarray | None = None) -> str:
    n = len(x)
    m, se = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(n)
    p = float(2 * sps.t.sf(abs(m) / se, n - 1)) if se else float(m == 0)
    t95, t90 = sps.t.ppf(0.975, n - 1), sps.t.ppf(0.95, n - 1)
    return _call(m, m - t95 * se, m + t95 * se, m - t90 * se, m + t90 * se, p, band)


def rule_hl(x: np.ndarray, band: float, _ct: np.ndarray | None = None) -> str:
    n = len(x)
    walsh = np.sort([(x[i] + x[j]) / 2 for i in range(n) for j in range(i, n)])
    est = float(np.median(walsh))
    # bootstrap draws repeat rounds (ties): the normal approximation, not a permutation test
    p = float(sps.wilcoxon(x, method="approx").pvalue) if np.any(x != 0) else 1.0
    mu, sd = n * (n + 1) / 4, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)

    def ci(conf: float) -> tuple[float, float]:
        k = max(0, int(math.floor(mu - sps.norm.ppf((1 + conf) / 2) * sd)))
        return float(walsh[k]), float(walsh[len(walsh) - 1 - k])

    (lo, hi), (lo90, hi90) = ci(0.95), ci(0.90)
    return _call(est, lo, hi, lo90, hi90, p, band)


def rule_trim(x: np.ndarray, band: float, _ct: np.ndarray | None = None,
              g: float = 0.2) -> str:
    n = len(x)
    k = int(math.floor(g * n))
    xs = np.sort(x)
    m = float(xs[k:n - k].mean())
    w = np.clip(xs, xs[k], xs[n - 1 - k])
    h = n - 2 * k
    se = float(w.std(ddof=1)) / ((1 - 2 * g) * math.sqrt(n)) if h > 1 else 0.0
    df = h - 1
    p = float(2 * sps.t.sf(abs(m) / se, df)) if se else float(m == 0)
    t95, t90 = sps.t.ppf(0.975, df), sps.t.ppf(0.95, df)
    return _call(m, m - t95 * se, m + t95 * se, m - t90 * se, m + t90 * se, p, band)


def rule_old(x: np.ndarray, band: float, ct: np.ndarray | None = None) -> str:
    """Before issue 31: whole 95 % interval beyond the control/twin interval's reach."""
    assert ct is not None
    r = stats.ratio_ci(list(np.exp(x)))
    c = stats.ratio_ci(list(np.exp(ct)))
    floor = max(abs(math.log(c.lo)), abs(math.log(c.hi)))  # type: ignore[arg-type]
    lo, hi = math.log(r.lo), math.log(r.hi)  # type: ignore[arg-type]
    if lo > floor or hi < -floor:
        return "faster" if lo > 0 else "slower"
    return "within noise" if -floor <= lo and hi <= floor else "cannot tell"


RULES: dict[str, Callable[..., str]] = {"old": rule_old, "t": rule_t, "hl": rule_hl,
                                        "trim": rule_trim}


# --- analysis ------------------------------------------------------------------------------------
def round_table(samples: list[dict[str, Any]], labels: list[str]) -> dict[tuple[str, str], np.ndarray]:
    """(model, workload) -> rounds x labels array of log speeds (clean, complete rounds only)."""
    cells: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    bad: set[tuple[str, str, int]] = set()
    for s in samples:
        if s["warmup"]:
            continue
        key = (s["model"], s["workload"])
        if s.get("disturbed"):
            bad.add((*key, s["round"]))
        cells.setdefault(key, {}).setdefault(s["round"], {})[s["label"]] = math.log(
            s["tokens_per_s"])
    out = {}
    for key, rounds in cells.items():
        rows = [[r[lb] for lb in labels] for rn, r in sorted(rounds.items())
                if len(r) == len(labels) and (*key, rn) not in bad]
        out[key] = np.asarray(rows)
    return out


def block_resample(n_avail: int, n: int, block: int, rng: np.random.Generator) -> np.ndarray:
    starts = rng.integers(0, n_avail - block + 1, size=math.ceil(n / block))
    return np.concatenate([np.arange(s, s + block) for s in starts])[:n]


def centred(tab: np.ndarray) -> np.ndarray:
    """The null imposed on a series before it is resampled: each label's mean log speed moved
    to the grand mean (one binary: the labels' true speeds are equal, and the series' own small
    label differences are noise that every bootstrap cell would otherwise inherit as a bias).
    The round-to-round structure (drift, slow processes) is kept as measured."""
    return tab - tab.mean(axis=0) + tab.mean()


def series_of(tab: np.ndarray, idx: np.ndarray, rule: str, effect: float = 0.0
              ) -> tuple[np.ndarray, np.ndarray | None]:
    """The per-round log ratio a rule judges (b over a, b scaled by 1 + effect), and the
    control/twin series (d over c) for the old rule; best2: max(a, c) against max(b, d)."""
    t = tab[idx]
    e = math.log1p(effect)
    if rule == "best2":
        return np.maximum(t[:, 1], t[:, 3]) + e - np.maximum(t[:, 0], t[:, 2]), None
    return t[:, 1] + e - t[:, 0], t[:, 3] - t[:, 2]


def judge_rule(rule: str, x: np.ndarray, ct: np.ndarray | None, band: float) -> str:
    return RULES["t" if rule in ("best2", "t2s") else rule](x, band, ct)


def two_stage_rounds(tab: np.ndarray, idx: np.ndarray, plan: tuple[Any, ...],
                     target: float, threshold: float) -> tuple[int, float | None]:
    """The rounds ``protocol.plan_rounds`` chooses from the pilot's A/A pair, and the cell's
    smallest callable effect at them (that pair's, as the report prints it). The pair is c over
    a: like the workflow's control over its twin, it shares label a with the judged b over a,
    so the choice is as correlated with the judged comparison's noise as it is there."""
    pilot, lo, hi, assurance, sequential = plan
    rule = {"pilot": pilot, "min": lo, "max": hi, "assurance": assurance, "target": target}
    ct = tab[idx[:pilot], 2] - tab[idx[:pilot], 0]
    n = protocol.rounds_from_sd(float(ct.std(ddof=1)), pilot, rule, threshold)[0]
    if sequential:  # the variant not taken: the SD re-estimated after every round, stop once
        n = pilot   # the rounds so far are enough for it (Chow-Robbins style)
        while n < hi and n < protocol.rounds_for(
                float((tab[idx[:n], 2] - tab[idx[:n], 0]).std(ddof=1)), target, threshold,
                lo, hi)[0]:
            n += 1
    full = tab[idx[:n], 2] - tab[idx[:n], 0]
    return n, protocol.smallest_callable(float(full.std(ddof=1)) / math.sqrt(n), n - 1, ALPHA,
                                         threshold)


def analyse(a: argparse.Namespace) -> None:
    doc = json.loads((Path(a.analyse) / "series.json").read_text())
    labels = doc["labels"]
    if len(labels) < 4:
        raise SystemExit("the analysis needs 4 labels (a/b compared, c/d the control pair)")
    tabs = round_table(doc["samples"], labels)
    rng = np.random.default_rng(a.seed)
    effects = [float(e) for e in a.effects.split(",")]
    rules = ["old", "t", "hl", "trim", "best2"]
    print(f"series: {len(tabs)} cells, labels {labels}, threads {doc['threads']}, CPUs "
          f"{doc['cpus']}, -r {doc['reps']}; judged at {a.rounds} rounds "
          f"(best2 also at {a.rounds // 2}, equal processes); block {a.block}; "
          f"{a.resamples} bootstrap cells per series")
    report: dict[str, Any] = {"cells": {}, "args": vars(a)}
    for key, tab in sorted(tabs.items()):
        phase = "decode" if key[1].startswith("tg") else "prefill"
        band = math.log1p(stats.threshold_for(
            json.loads(a.threshold) if a.threshold.startswith("{") else float(a.threshold),
            phase))
        n_avail = len(tab)
        logs = tab[:, 1] - tab[:, 0]
        raw_means = {lb: float(np.exp(tab[:, i].mean() - tab.mean())) for i, lb in
                     enumerate(labels)}
        tab = centred(tab)
        sd_ab = float(logs.std(ddof=1))
        print(f"\n{key[0]} {key[1]} ({phase}, δ ±{math.expm1(band) * 100:.0f} %): "
              f"{n_avail} clean rounds; per-round SD of log(b/a) {sd_ab * 100:.1f} %, "
              f"of log(d/c) {float((tab[:, 3] - tab[:, 2]).std(ddof=1)) * 100:.1f} %, of "
              f"best-of-2 {float(series_of(tab, np.arange(n_avail), 'best2')[0].std(ddof=1)) * 100:.1f} %")
        if doc.get("unpinned_labels"):
            print(f"  placement: labels {', '.join(doc['unpinned_labels'])} ran unpinned; "
                  f"per-round SD of log(b/a) (a, b pinned to {doc['cpus']}) {sd_ab * 100:.1f} %, "
                  f"of log(d/c) (c, d unpinned) "
                  f"{float((tab[:, 3] - tab[:, 2]).std(ddof=1)) * 100:.1f} %; the rules below "
                  "then mix both placements")
        if n_avail < a.block + 2:
            print("  too few rounds")
            continue
        row: dict[str, Any] = {"sd_ab": sd_ab, "rounds": n_avail, "label_means": raw_means,
                               "rules": {}}
        plans = [(r, a.rounds) for r in rules] + [("best2", a.rounds // 2)]
        two = (tuple(int(v) for v in a.two_stage.split(",")) + (a.assurance, a.sequential)
               if a.two_stage else None)
        horizon = max(a.rounds, two[2] if two else 0)
        draws = [block_resample(n_avail, horizon, a.block, rng) for _ in range(a.resamples)]
        target = protocol.threshold_for(json.loads(a.target), phase)
        if two:
            chosen = [two_stage_rounds(tab, d, two, target, math.expm1(band)) for d in draws]
            ns = [n for n, _ in chosen]
            met = np.mean([m is not None and m <= target for _, m in chosen])
            row["two_stage"] = {"plan": two, "target": target, "rounds_mean": float(np.mean(ns)),
                                "rounds_min": min(ns), "rounds_max": max(ns),
                                "capped": float(np.mean([n >= two[2] for n in ns])),
                                "target_met": float(met)}
            print(f"  t2s {two}: rounds {np.mean(ns):.1f} on average ({min(ns)}-{max(ns)}; "
                  f"at the cap in {row['two_stage']['capped'] * 100:.0f} %); the cell's own "
                  f"80 %-power figure met ±{target * 100:g} % in {met * 100:.0f} % of cells")
            plans.append(("t2s", 0))
        for rule, n in plans:
            idxs = ([d[:c] for d, (c, _) in zip(draws, chosen)] if rule == "t2s"
                    else [d[:n] for d in draws])
            fc = np.mean([judge_rule(rule, *series_of(tab, i, rule), band) in ("faster", "slower")
                          for i in idxs])
            eq = np.mean([judge_rule(rule, *series_of(tab, i, rule), band)
                          in ("equivalent", "within noise") for i in idxs])
            pw = {e: float(np.mean([judge_rule(rule, *series_of(tab, i, rule, e), band)
                                    == "faster" for i in idxs])) for e in effects}
            mde = next((e for e in effects if pw[e] >= 0.8), None)
            name = "t2s" if rule == "t2s" else f"{rule}@{n}"
            row["rules"][name] = {"false_calls": float(fc), "equivalent_aa": float(eq),
                                  "power": pw, "mde80": mde}
            print(f"  {name:<9} false calls {fc * 100:5.1f} %  A/A equivalent {eq * 100:5.1f} %"
                  f"  power " + " ".join(f"{e * 100:g}%:{pw[e] * 100:3.0f}" for e in effects)
                  + f"  -> 80 % at {'>' + str(effects[-1]) if mde is None else f'{mde * 100:g} %'}")
        report["cells"][f"{key[0]} {key[1]}"] = row
    print("\nover all cells (mean false-call rate; median smallest effect called in 80 %):")
    for name in next(iter(report["cells"].values()))["rules"]:
        rows = [c["rules"][name] for c in report["cells"].values() if name in c["rules"]]
        fc = float(np.mean([r["false_calls"] for r in rows]))
        by_phase = {}
        for ph in ("prefill", "decode"):
            m = [r["mde80"] for k, r in ((k, c["rules"][name]) for k, c in report["cells"].items())
                 if (k.split()[1].startswith("tg")) == (ph == "decode")]
            by_phase[ph] = ("-" if not m else ">" + str(effects[-1]) if None in m
                            else f"{float(np.median(m)) * 100:g} %")
        print(f"  {name:<9} false calls {fc * 100:4.1f} %   80 % power at: prefill "
              f"{by_phase['prefill']}, decode {by_phase['decode']}")
    suffix = (f"-t2s{a.two_stage.replace(',', '-')}-a{a.assurance:g}"
              + ("-seq" if a.sequential else "")) if a.two_stage else ""
    atomic_write_json(str(Path(a.analyse) / f"analysis-r{a.rounds}{suffix}.json"), report)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="measure into this folder (then analyse it)")
    ap.add_argument("--analyse", help="analyse this folder's series.json only")
    ap.add_argument("--no-analysis", action="store_true",
                    help="with --out: measure only (e.g. series for sequential_rules.py)")
    ap.add_argument("--bin-dir")
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--workloads", default="pp32,pp128,tg64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1, help="llama-bench -r per process")
    ap.add_argument("--labels", type=int, default=4)
    ap.add_argument("--rounds-measured", type=int, default=24)
    ap.add_argument("--cpus", default="auto", help="auto (as the workflow), none, or 0,1")
    ap.add_argument("--unpinned-labels", default="",
                    help="labels that run unpinned, e.g. c,d: pinned against unpinned spread "
                         "(on a host with spare CPUs)")
    ap.add_argument("--rounds", type=int, default=12, help="rounds a judged cell has")
    ap.add_argument("--block", type=int, default=2)
    ap.add_argument("--resamples", type=int, default=400)
    ap.add_argument("--effects", default="0.02,0.03,0.05,0.075,0.1,0.15,0.2,0.3")
    ap.add_argument("--threshold", default='{"prefill": 0.05, "decode": 0.03}')
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--two-stage", default="", help="PILOT,MIN,MAX: also the t2s rule")
    ap.add_argument("--assurance", type=float, default=0.8,
                    help="t2s: plan for the pilot SD's upper confidence limit at this level")
    ap.add_argument("--sequential", action="store_true",
                    help="t2s variant: re-estimate the SD after every round (not the workflow's)")
    ap.add_argument("--target", default='{"prefill": 0.10, "decode": 0.05}',
                    help="the effect t2s plans to call with 80 %% power")
    a = ap.parse_args()
    if a.cpus not in ("auto", "none"):
        a.cpus = [int(c) for c in a.cpus.split(",")]
    a.unpinned_labels = [x for x in a.unpinned_labels.split(",") if x]
    if a.out:
        if not (a.bin_dir and a.model):
            raise SystemExit("--out measures: it needs --bin-dir and at least one --model")
        a.analyse = str(measure(a))
        if a.no_analysis:
            return
    if not a.analyse:
        raise SystemExit("give --out (measure, then analyse) or --analyse DIR")
    analyse(a)


if __name__ == "__main__":
    main()
