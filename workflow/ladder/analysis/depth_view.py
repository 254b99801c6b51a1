"""The report's view of the long-context experiment (``measuring/depth``, ``serving.depth``):
each (depth, phase) point judged like a bench cell, each comparison's ratio along the depths,
and where its advantage reaches 1x (the crossover), estimated between measured points or
bounded; analysis only (it reads the kept result, never runs anything)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ladder.analysis import stats, wording
from ladder.planning import protocol, sequential

PHASES = ("prefill", "decode")


def point_doc(doc: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
    """One (depth, phase) point of a depth result as a cell of its own: its samples, its
    workload, and the anytime-valid design's decisions on it (``sequential.point_key``)."""
    name = str(point["point"])
    sub: dict[str, Any] = {**doc, "workload": name,
                           "workload_spec": {"n_prompt": point["n_prompt"],
                                             "n_gen": point["n_gen"]},
                           "samples": [s for s in doc["samples"] if s.get("point") == name]}
    seq = doc.get("sequential")
    if seq:
        sub["sequential"] = {**seq, "decided": sequential.decided_at(seq.get("decided") or {},
                                                                     name)}
    return sub


def summarize_depth(doc: Mapping[str, Any], plan: Mapping[str, Any],
                    stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Every point judged against the control's noise floor at that point; peak RSS and restore
    time per rung and depth (medians over rounds); the fill each rung paid once."""
    ladder, control, twin = plan["ladder_order"], plan.get("control"), plan.get("twin")
    pts = []
    for p in doc["points"]:
        sub = point_doc(doc, p)
        if not sub["samples"]:
            continue
        pts.append({**{k: p[k] for k in ("point", "depth", "phase")},
                    "cell": stats.summarize(sub, ladder, control, twin, stats_cfg)})
    return {"experiment": "depth", "threads": doc["threads"], "points": pts,
            "rung_status": doc["rungs"], "method": doc["method"], "spec": doc["spec"],
            "memory": memory(doc["samples"]), "fills": doc.get("fills") or {},
            "curves": {}, "sentences": [], "hotspots": where_time_goes(doc.get("hotspots")),
            "levers": [summarize_levers(doc, lv, stats_cfg) for lv in doc.get("levers") or []
                       if lv.get("samples")]}


def where_time_goes(hs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The hotspots at the shallowest and deepest depth per rung: each cell's shares, the
    kernel families' (the matmul kernels the dispatch ledger counts) and attention's summed,
    and a sentence per rung on how they move with depth."""
    if not hs or hs.get("status") != "ok":
        return {"status": (hs or {}).get("status", "off"), "reason": (hs or {}).get("reason"),
                "rows": [], "sentences": []}
    fams = set(hs.get("families") or [])
    rows = []
    for c in hs["cells"]:
        groups = c.get("groups") or {}
        rows.append({"rung": c["rung"], "depth": c.get("depth"), "status": c.get("status"),
                     "reason": c.get("reason"), "samples": c.get("samples"),
                     "kernels": round(sum(v for g, v in groups.items() if g in fams), 4)
                     if groups else None,
                     "attention": groups.get("attention", 0.0) if groups else None,
                     "top_groups": sorted(groups.items(), key=lambda kv: -kv[1])[:4]})
    sentences = []
    for rung in dict.fromkeys(r["rung"] for r in rows):
        mine = sorted((r for r in rows if r["rung"] == rung and r["status"] == "ok"),
                      key=lambda r: r["depth"])
        if len(mine) == 2:
            a, b = mine
            sentences.append(
                f"`{rung}`: attention {a['attention']:.0%} of the sampled time at d{a['depth']},"
                f" {b['attention']:.0%} at d{b['depth']}; the matmul kernel families "
                f"{a['kernels']:.0%} and {b['kernels']:.0%}.")
    return {"status": "ok", "reason": None, "depths": hs.get("depths"),
            "frequency_hz": hs.get("frequency_hz"), "rows": rows, "sentences": sentences}


def summarize_levers(doc: Mapping[str, Any], lv: Mapping[str, Any],
                     stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One lever rung's settings: each judged against the baseline at every lever point (its
    own noise floor: the baseline's second label), and whether it changes the curve
    (``curve_change``) per phase."""
    sub = {**doc, **lv}
    pts = []
    for p in lv["points"]:
        one = point_doc(sub, p)
        if one["samples"]:
            pts.append({**{k: p[k] for k in ("point", "depth", "phase")},
                        "cell": stats.summarize(one, lv["settings"], lv.get("control"),
                                                lv["baseline"], stats_cfg)})
    seq = lv.get("sequential") or {}
    rule = Design(int(seq.get("max") or 0), 1 - float(stats_cfg["confidence"]),
                  stats.cell_factor(sub, stats_cfg),
                  {ph: protocol.threshold_for(stats_cfg.get("threshold"), ph) for ph in PHASES})
    changes = [curve_change(lv["samples"], (lv["baseline"], setting), lv["points"], phase, rule)
               for setting in lv["settings"][1:] for phase in PHASES]
    return {"base": lv["base"], "baseline": lv["baseline"], "settings": lv["settings"],
            "depths": lv["depths"], "points": pts, "rung_status": lv["rungs"],
            "changes": [c for c in changes if c], "memory": memory(lv["samples"])}


@dataclass(frozen=True)
class Design:
    """How a lever cell's repeated intervals are read: the design's maximum rounds, its level
    (1 - confidence), the variance factor of its rounds and δ per phase."""
    n_max: int
    alpha: float
    factor: float
    thresholds: Mapping[str, float]


def curve_change(samples: Sequence[Mapping[str, Any]], pair: tuple[str, str],
                 pts: Sequence[Mapping[str, Any]], phase: str, rule: Design
                 ) -> dict[str, Any] | None:
    """Whether a lever setting changes the depth curve: per round, its log ratio against the
    baseline at the deepest lever depth minus the same at the shallowest (both measured in that
    round, in one server each), judged on the anytime-valid design's repeated interval (valid
    at the round the cell stopped) against ±δ: "grows"/"shrinks" (its effect at depth differs
    by at least δ), "unchanged" (within ±δ), or "cannot tell"."""
    baseline, setting = pair
    threshold = float(rule.thresholds[phase])
    mine = sorted((p for p in pts if p["phase"] == phase), key=lambda p: p["depth"])
    if len(mine) < 2:
        return None
    shallow, deep = mine[0], mine[-1]
    clean = [s for s in samples if not s.get("warmup") and not s.get("disturbed")]

    def per_round(point: str) -> dict[int, float]:
        got = {}
        for r in {int(s["round"]) for s in clean}:
            a = [s["tokens_per_s"] for s in clean if s["round"] == r and s["point"] == point
                 and s["rung"] == baseline]
            b = [s["tokens_per_s"] for s in clean if s["round"] == r and s["point"] == point
                 and s["rung"] == setting]
            if a and b and a[0] > 0 and b[0] > 0:
                got[r] = math.log(b[0] / a[0])
        return got

    lo_r, hi_r = per_round(str(shallow["point"])), per_round(str(deep["point"]))
    diffs = [hi_r[r] - lo_r[r] for r in sorted(set(lo_r) & set(hi_r))]
    out: dict[str, Any] = {"setting": setting, "phase": phase, "rounds": len(diffs),
                           "shallow": shallow["depth"], "deep": deep["depth"],
                           "threshold": threshold}
    got = (sequential.repeated_interval(diffs, max(rule.n_max, len(diffs)), rule.alpha,
                                        rule.factor)
           if len(diffs) >= sequential.MIN_ROUNDS else None)
    if got is None:
        return {**out, "call": "cannot tell", "estimate": None, "lo": None, "hi": None,
                "why": f"{len(diffs)} paired rounds (needs {sequential.MIN_ROUNDS})"}
    m, lo, hi = got
    d = sequential.decide(lo, hi, threshold)
    call = {"faster": "grows", "slower": "shrinks", "equivalent": "unchanged"}.get(
        d or "", "cannot tell")
    return {**out, "call": call, "estimate": math.exp(m), "lo": math.exp(lo), "hi": math.exp(hi)}


def lever_sentence(lv: Mapping[str, Any]) -> str:
    """Which lever settings change the curve on their rung, or that none does (and what could
    not be told)."""
    changed = [c for c in lv["changes"] if c["call"] in ("grows", "shrinks")]
    open_ = [c for c in lv["changes"] if c["call"] == "cannot tell"]

    def one(c: Mapping[str, Any]) -> str:
        rel = (f"{wording.fmt_ratio(c['estimate'])} (interval {wording.fmt_ratio(c['lo'])}-"
               f"{wording.fmt_ratio(c['hi'])})" if c.get("estimate") else "-")
        return (f"`{c['setting']}` ({c['phase']}): its effect at d{c['deep']} is {rel} its "
                f"effect at d{c['shallow']}")

    head = f"On `{lv['base']}`, against `{lv['baseline']}`: "
    if changed:
        text = head + "changes the curve: " + "; ".join(one(c) for c in changed) + "."
    else:
        text = head + ("no setting changes the curve by δ or more" if not open_ else
                       "no setting is shown to change the curve") + "."
    if open_:
        text += " Not decided: " + "; ".join(one(c) for c in open_) + "."
    return text


def memory(samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per rung and depth: the server's peak RSS (MiB) and the restore's time (ms), medians of
    the clean rounds (one request per depth and round: its prefill sample)."""
    rows: dict[tuple[str, int], dict[str, list[float]]] = {}
    for s in samples:
        if s.get("disturbed") or s.get("warmup") or s.get("phase") != "prefill":
            continue
        r = rows.setdefault((str(s["rung"]), int(s["depth"])), {"rss": [], "restore": []})
        if s.get("peak_rss_kib"):
            r["rss"].append(float(s["peak_rss_kib"]) / 1024)
        if s.get("restore_ms") is not None:
            r["restore"].append(float(s["restore_ms"]))
    return [{"rung": n, "depth": d,
             "peak_rss_mib": round(statistics.median(v["rss"]), 1) if v["rss"] else None,
             "restore_ms": round(statistics.median(v["restore"]), 2) if v["restore"] else None}
            for (n, d), v in sorted(rows.items())]


def curves(points: Sequence[Mapping[str, Any]], phase: str) -> list[dict[str, Any]]:
    """Each comparison (the ladder's steps and each rung over the floor) along the depths of
    one phase: per depth its ratio, interval and call, and its crossover (``crossover``)."""
    pts = sorted((p for p in points if p["phase"] == phase), key=lambda p: p["depth"])
    found: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for p in pts:
        for c in p["cell"]["steps"] + p["cell"]["vs_floor"]:
            r = c["ratio"]
            if not r.get("estimate"):
                continue
            found.setdefault((c["kind"], c["base"], c["rung"]), []).append(
                {"depth": p["depth"], "estimate": r["estimate"], "lo": r.get("lo"),
                 "hi": r.get("hi"), "call": c["verdict"]["call"]})
    out = []
    for (kind, base, rung), series in found.items():
        if kind == "vs_floor" and any(k == "step" and b == base and o == rung
                                      for k, b, o in found):
            continue  # the first step is the floor comparison: said once
        out.append({"kind": kind, "base": base, "rung": rung, "phase": phase,
                    "series": series, "crossover": crossover(series)})
    return out


def crossover(series: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Where a comparison's advantage reaches 1x along the depths, from its calls (each at the
    run's error rate): "between" two measured depths (called faster at the shallower, slower at
    the deeper, the 1x point interpolated in log ratio against depth between them), "none
    below" the deepest depth (still called faster there), "from the start" (already slower at
    the shallowest), or "not located" (the calls cannot place it, named)."""
    pts = sorted(series, key=lambda s: s["depth"])
    calls = [s["call"] for s in pts]
    if not pts:
        return {"kind": "not located", "why": "no depth measured"}
    first_slower = next((i for i, c in enumerate(calls) if c == "slower"), None)
    if calls[0] == "slower":
        return {"kind": "from the start", "depth": pts[0]["depth"]}
    if first_slower is not None:
        last_faster = max((i for i in range(first_slower) if calls[i] == "faster"),
                          default=None)
        if last_faster is None:
            return {"kind": "not located", "slower_from": pts[first_slower]["depth"],
                    "why": "no shallower depth was called faster"}
        lo_d, hi_d = pts[last_faster]["depth"], pts[first_slower]["depth"]
        seg = pts[last_faster:first_slower + 1]
        return {"kind": "between", "lo": lo_d, "hi": hi_d, "estimate": _one_x(seg)}
    if calls[-1] == "faster":
        return {"kind": "none below", "depth": pts[-1]["depth"],
                "estimate_at_deepest": pts[-1]["estimate"], "lo_at_deepest": pts[-1]["lo"]}
    return {"kind": "not located", "why": "the deepest point is not called "
            f"({calls[-1]}) and none is called slower"}


def _one_x(seg: Sequence[Mapping[str, Any]]) -> float | None:
    """The depth where the log ratio crosses 0, linearly interpolated between the last measured
    point above 1x and the next one at or below it."""
    for a, b in zip(seg, seg[1:]):
        la, lb = math.log(a["estimate"]), math.log(b["estimate"])
        if la > 0 >= lb:
            return round(a["depth"] + (b["depth"] - a["depth"]) * la / (la - lb), 1)
    return None


def sentence(curve: Mapping[str, Any]) -> str:
    """One comparison's curve in words: its ratio at the shallowest and deepest depths and its
    crossover."""
    s, x = curve["series"], curve["crossover"]
    head = (f"`{curve['rung']}` over `{curve['base']}` ({curve['phase']}): "
            + ", ".join(f"{wording.fmt_ratio(p['estimate'])} at d{p['depth']}"
                        for p in (s[0], s[-1]) if p) + "; ")
    kind = x["kind"]
    if kind == "between":
        est = f" (about d{x['estimate']:g}, interpolated)" if x.get("estimate") else ""
        return head + (f"its advantage ends between d{x['lo']} (called faster) and "
                       f"d{x['hi']} (called slower){est}.")
    if kind == "none below":
        return head + f"no crossover below d{x['depth']} (still called faster there)."
    if kind == "from the start":
        return head + f"already called slower at d{x['depth']}: no advantage to lose."
    return head + f"crossover not located: {x['why']}."


def finish(view: dict[str, Any]) -> None:
    """After the serving family's multiplicity step: each phase's curves and their sentences
    (read from the adjusted verdicts)."""
    view["curves"] = {ph: curves(view["points"], ph) for ph in PHASES}
    view["sentences"] = [sentence(c) for ph in PHASES for c in view["curves"][ph]]
    for lv in view.get("levers") or []:
        lv["sentence"] = lever_sentence(lv)


def judged(view: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [p["cell"] for p in view["points"]] + [
        p["cell"] for lv in view.get("levers") or [] for p in lv["points"]]
