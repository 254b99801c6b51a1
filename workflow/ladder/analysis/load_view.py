"""The report's view of serving under load (``measuring/load`` measures it): each level's
requests pooled per rung, per-round percentiles with intervals, p50/p99 TTFT and TPOT judged per
level like a bench cell, the agent's turns, the prompt-caching lever, and the sentences."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from scipy.stats import binomtest

from ladder.measuring import load_client
from ladder.analysis import stats, wording
from ladder.planning import steady

# what the report judges per level, with the threshold phase each belongs to
JUDGED = {"ttft_p50_ms": "prefill", "ttft_p99_ms": "prefill",
          "tpot_p50_ms": "decode", "tpot_p99_ms": "decode"}
LABELS = {"ttft_p50_ms": "p50 TTFT", "ttft_p99_ms": "p99 TTFT", "tpot_p50_ms": "p50 TPOT",
          "tpot_p99_ms": "p99 TPOT"}


def pooled(doc: Mapping[str, Any], rung: str, level: str) -> dict[str, Any] | None:
    """A rung's level over all rounds: every request pooled, durations summed."""
    rows = [r for r in doc["levels"] if r["rung"] == rung and r["level"] == level]
    if not rows:
        return None
    recs = [r for r in doc["requests"] if r["rung"] == rung and r["level"] == level]
    out = load_client.summarize(recs, sum(r["duration_s"] for r in rows), doc["spec"]["limits"])
    # the rate a round's sends achieved is a round's own (send times start at each level's
    # origin): their mean over rounds, never one rate over pooled sends
    rates = [r["summary"].get("achieved_rate_rps") for r in rows]
    rates = [x for x in rates if x is not None]
    out["achieved_rate_rps"] = sum(rates) / len(rates) if rates else None
    return out


def client_behind(row: Mapping[str, Any]) -> bool | None:
    """An open-loop level whose client fell behind its schedule: the p99 send lag is more than
    half the mean gap (the rate offered was not the rate named; aiperf flags such levels)."""
    lag, rate = (row.get("pooled") or {}).get("send_lag_p99_ms"), row.get("rate")
    if row.get("kind") != "open" or lag is None or not rate:
        return None
    return lag > 500.0 / float(rate)


def per_round(doc: Mapping[str, Any], rung: str, level: str, key: str) -> list[Any]:
    return [r["summary"][key] for r in doc["levels"]
            if r["rung"] == rung and r["level"] == level and r["summary"].get(key) is not None]


def metric_cell(doc: Mapping[str, Any], level: str, key: str, ladder: Sequence[str],
                control: str | None, twin: str | None, stats_cfg: Mapping[str, Any]
                ) -> dict[str, Any]:
    """One level's metric judged like a bench cell: per round and rung the latency as a rate
    (1000 / ms, so "faster" means lower latency), paired across rungs within rounds. A round in
    which a rung's percentile is "failed" (its failed requests reach it) counts as the request
    timeout, the least a failed request's latency can be (censored: a conservative worst
    value); it is never dropped, so a rung that times out is not judged on its good rounds
    only."""
    timeout_ms = 1000.0 * float(doc["spec"].get("request_timeout_s") or 0) or None
    finite = [x["summary"][key] for x in doc["levels"]
              if x["level"] == level and isinstance(x["summary"].get(key), (int, float))]
    worst = max([timeout_ms, *finite]) if timeout_ms is not None else None
    samples = []
    for r in doc["levels"]:
        v = r["summary"].get(key) if r["level"] == level else None
        censored = v == load_client.FAILED and worst is not None
        if censored:
            v = worst
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            continue
        samples.append({"rung": r["rung"], "round": r["round"], "order": r["order"],
                        "warmup": False, "build_key": r["build_key"],
                        "tokens_per_s": 1000.0 / v, "censored": censored})
    phase = JUDGED[key]
    spec = {"n_prompt": doc["spec"]["n_prompt"], "n_gen": 0} if phase == "prefill" else \
        {"n_prompt": 0, "n_gen": doc["spec"]["n_gen"]}
    pseudo = {"quant": doc["quant"], "workload": f"{level} {LABELS[key]}",
              "threads": doc["threads"], "samples": samples, "workload_spec": spec}
    return stats.summarize(pseudo, ladder, control, twin, stats_cfg)


def interval(values: Sequence[float], confidence: float) -> dict[str, Any]:
    """A per-round metric's geometric mean across rounds and its t-interval (finite values)."""
    fin = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    r = stats.ratio_ci(fin, confidence)
    return {"estimate": r.estimate, "lo": r.lo, "hi": r.hi, "n": r.n,
            "failed_rounds": len(values) - len(fin)}


def summarize_load(doc: Mapping[str, Any], plan: Mapping[str, Any],
                   stats_cfg: Mapping[str, Any],
                   price: Mapping[str, Any] | None = None) -> dict[str, Any]:
    ladder, control, twin = plan["ladder_order"], plan.get("control"), plan.get("twin")
    names = [n for n in list(ladder) + ([control] if control else [])
             if any(r["rung"] == n for r in doc["levels"])]
    conf = stats_cfg["confidence"]
    table, cells, agent = [], [], []
    for lv in doc["levels_planned"]:
        level = lv["level"]
        if lv["kind"] == "capacity":
            continue  # its probes are the capacity search's (``capacity``)
        for n in names:
            p = pooled(doc, n, level)
            if p is None:
                continue
            row = {**lv, "rung": n, "pooled": p,
                   "per_round": {k: interval(per_round(doc, n, level, k), conf)
                                 for k in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms",
                                           "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
                                           "itl_p50_ms", "itl_p90_ms", "itl_p99_ms",
                                           "output_tokens_per_s", "goodput_rps")},
                   "server_metrics": _metrics_peaks(doc, n, level)}
            row["client_behind"] = client_behind(row)
            if lv["kind"] == "agent":
                row["turns"] = _turns(doc, n, level)
                agent.append(row)
            else:
                table.append(row)
        if lv["kind"] != "agent":
            for key in JUDGED:
                cells.append({"level": level, "metric": key, "label": LABELS[key],
                              "cell": metric_cell(doc, level, key, ladder, control, twin,
                                                  stats_cfg)})
    cap = capacity(doc, ladder, control, twin, stats_cfg, price)
    if cap:
        cap["checks"] = saturation_checks(doc, table, cap)
    return {"experiment": "load", "threads": doc["threads"], "quant": doc["quant"],
            "spec": doc["spec"], "mix_text": mix_words(doc), "slots": doc["slots"], "cpus": doc.get("cpus"),
            "client_cpus": doc.get("client_cpus"), "rounds": doc["rounds"],
            "table": table, "success_only": success_only(table), "cells": cells,
            "capacity": cap,
            "concurrency_capacity": capacity(doc, ladder, control, twin, stats_cfg, price,
                                             "concurrency"),
            "agent": agent, "cache_lever": _cache_lever(
                doc, names, stats_cfg) if any(lv["kind"] == "agent"
                                              for lv in doc["levels_planned"]) else [],
            "rung_status": doc["rungs"], "method": doc["method"],
            "definitions": DEFINITIONS}


def mix_words(doc: Mapping[str, Any]) -> str:
    """The request mix in words, with the mean lengths of the requests sent (every level's)."""
    spec, mix = doc["spec"], doc["spec"].get("mix") or {}
    recs = [r for r in doc["requests"] if r.get("prompt_tokens") is not None
            and r.get("n_predict") is not None and r.get("turn") is None]
    sent = (f"; sent: {sum(r['prompt_tokens'] for r in recs) / len(recs):.1f} prompt + "
            f"{sum(r['n_predict'] for r in recs) / len(recs):.1f} output tokens on average over "
            f"{len(recs)} requests") if recs else ""
    if mix.get("kind", "fixed") == "fixed":
        return f"each {spec['n_prompt']} prompt + {spec['n_gen']} output tokens{sent}"
    return (f"prompt and output lengths drawn per request (seeded) from lognormals of mean "
            f"{spec['n_prompt']} and {spec['n_gen']} tokens (coefficient of variation "
            f"{mix['prompt_cv']:g} and {mix['output_cv']:g}, at most {mix['max_factor']:g}x the "
            f"mean){sent}")


def service_ms(doc: Mapping[str, Any], rung: str, level: str) -> float | None:
    """A rung's mean service time per request at ``level``, from its server's own timings
    (prefill + decode, llama-server's prompt_ms + predicted_ms) over its completed requests."""
    times = [float(c["prompt_ms"]) + float(c["predicted_ms"])
             for r in doc["requests"] if r["rung"] == rung and r["level"] == level
             and r["status"] == "ok" for c in [r.get("check") or {}]
             if c.get("prompt_ms") is not None and c.get("predicted_ms") is not None]
    return sum(times) / len(times) if times else None


def saturation_checks(doc: Mapping[str, Any], table: Sequence[Mapping[str, Any]],
                      cap: dict[str, Any]) -> list[dict[str, Any]]:
    """Beside each rung's rate capacity, what bounds it (issue 59, item 4): the saturation
    throughput its closed-loop levels measured (the most completed requests/s any of them
    got: no rate is sustained above it) and the capacity its server's own service time
    predicts (slots / the mean prefill + decode time of its requests at its lightest closed
    level, where nothing queues). A capacity above the saturation throughput is impossible:
    flagged as a defect of the run (a probe too short to show its backlog, say). Each entry
    of ``cap["rungs"]`` gets ``saturation_rps``, ``predicted_rps`` and
    ``above_saturation``; the sentences are returned."""
    out = []
    for e in cap["rungs"]:
        closed = [row for row in table if row["rung"] == e["rung"] and row.get("kind") == "closed"]
        sat = max((float(row["pooled"].get("requests_per_s") or 0) for row in closed),
                  default=0.0) or None
        light = min(closed, key=lambda row: int(row.get("concurrency") or 0), default=None)
        # the service time with every slot busy, measured at each server's warm-up (what the
        # probes are sized by); else a lone request's at the lightest closed level
        busy = sorted(float(r["service_ms"]) for r in doc["levels"]
                      if r["rung"] == e["rung"] and r["kind"] == "capacity"
                      and r.get("service_ms"))
        svc = busy[len(busy) // 2] if busy else (
            service_ms(doc, e["rung"], light["level"]) if light else None)
        where = ("with every slot busy, the median of its servers' warm-ups" if busy else
                 f"at {light['level'] if light else '-'}")
        predicted = int(doc.get("slots") or 1) * 1000.0 / svc if svc else None
        above = bool(sat and e.get("estimate") and e["estimate"] > sat)
        e.update(saturation_rps=sat, service_ms=svc, predicted_rps=predicted,
                 above_saturation=above)
        if sat is None and predicted is None:
            continue
        text = (f"`{e['rung']}`: capacity {e['estimate']:.3g} req/s" if e.get("estimate")
                else f"`{e['rung']}`: no capacity measured")
        parts = []
        if sat is not None:
            parts.append(f"saturation {sat:.3g} req/s (closed loop, the most any level "
                         "completed)")
        if predicted is not None:
            parts.append(f"{predicted:.3g} req/s from its server's own service time "
                         f"({svc:.0f} ms of prefill and decode per request {where}, "
                         f"{doc.get('slots')} slot(s))")
        text += "; " + "; ".join(parts)
        if above:
            text += (": **above its saturation throughput, which no rate can be sustained "
                     "beyond: a defect of this run** (its probes ended before a backlog "
                     "showed)")
        out.append({"rung": e["rung"], "above_saturation": above, "text": text})
    return out


def resolution(spec: Mapping[str, Any]) -> float:
    """The factor a bracketed capacity is resolved to: its double failed, then ``bisect``
    geometric halvings of the bracket (2: 2^(1/4) = 1.19x)."""
    return float(2 ** (1 / 2 ** int(spec["bisect"])))


# The two searches of a capacity row (``load._capacity``): its key in the row, the key of a
# round's value, the words, a probe's value, the search's top and the settings that define it
# (the resolution: ``_resolution``; streams are bisected to one stream, a grid of their own:
# ``grid_step``)
DIMS: dict[str, dict[str, Any]] = {
    "rate": {"row": "capacity", "value": "capacity_rps", "what": "request rate", "x": "rate",
             "top": "max_rps",
             "search": ("warmup_services", "measure_services", "probe_max_s", "start_rps",
                        "min_rps", "max_rps", "bisect", "start_from_service", "warm_start")},
    "concurrency": {"row": "concurrency", "value": "capacity_streams",
                    "what": "concurrent streams", "x": "concurrency", "top": "max_streams",
                    "search": ("max_streams", "waves", "requests", "warm_start")},
}


def _resolution(spec: Mapping[str, Any], dim: str) -> float:
    return resolution(spec) if dim == "rate" else 1.0


def grid_step(values: Sequence[float], res: float) -> float:
    """The widest step (log scale) of the grid these capacities were read off: a round's true
    capacity lies in [found, found x step). A rate: the search's resolution ``res``; streams
    (``res`` 1: bisected to one stream), from k to k + 1, widest at the smallest k (4 against 3
    streams is a ratio anywhere in 1.0-1.67x). Carried by every interval and test of a
    capacity (issue 59: repeated grid values gave a zero-width interval and p = 0)."""
    if res > 1:
        return math.log(res)
    k = min((v for v in values if v), default=None)
    return math.log((k + 1) / k) if k else 0.0


def grid_sd(step: float, values_per_ratio: int = 2) -> float:
    """The SD (log scale) of a ratio of ``values_per_ratio`` grid readings, each uniform within
    its step (a uniform's SD is its width / √12)."""
    return step * math.sqrt(values_per_ratio / 12)


def _capacity_value(found: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """A round's capacity as a number, and its censoring: the highest rate (or streams) that
    passed (the true capacity lies in [it, it x resolution)); "above": the search's top passed
    (a lower bound); "below": even the lowest tried failed, and it counts as that value (an
    upper bound). Clamped into the search's range, a ratio only moves toward 1x."""
    lo, hi = found["bracket"]
    if found["bound"] == "below":
        if untestable_below(found):
            return None, "untestable"
        return hi, "below"
    return lo, ("above" if found["bound"] == "above" else None)


def untestable_below(found: Mapping[str, Any]) -> bool:
    """A search below whose every probe was untestable (``steady.window``: longer than
    probe_max_s at the rung's service time): no rate was tested, so the capacity is unknown,
    not below the lowest rate (a slow rung's probes are long)."""
    return steady.untestable(found.get("probes") or [])


def _at_capacity(found: Mapping[str, Any], dim: str) -> float | None:
    """Output tokens/s measured by the round's highest passing probe, over its measured
    window."""
    passed = [p for p in found.get("probes", []) if p.get("passed") and p.get(DIMS[dim]["x"])
              == found["bracket"][0]]
    return passed[-1].get("output_tokens_per_s") if passed else None


def _rung_capacity(name: str, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any],
                   conf: float, price: Mapping[str, Any] | None, dim: str = "rate"
                   ) -> dict[str, Any]:
    """One rung's capacity over its rounds: the geometric mean, its interval widened by the
    resolution (open on a side a censored round leaves unbounded), output tok/s and $ per
    million output tokens at it (what its passing probes at the capacity measured over their
    measured windows), each printed as the bound it is when rounds were censored."""
    d = DIMS[dim]
    res = _resolution(spec, dim)
    rounds = []
    for r in sorted(rows, key=lambda r: r["round"]):
        found = r[d["row"]]
        value, censored = _capacity_value(found)
        rounds.append({"round": r["round"], d["value"]: value, "censored": censored,
                       "bracket": found["bracket"], "hint": found.get("hint"),
                       "probes": len(found["probes"]),
                       "duration_s": found.get("duration_s", r["duration_s"]),
                       "output_tokens_per_s": _at_capacity(found, dim)})
    values = [x[d["value"]] for x in rounds if x[d["value"]]]
    step = grid_step(values, res)
    est = stats.ratio_ci(values, conf, grid_sd=grid_sd(step, 1))
    below = sum(x["censored"] == "below" for x in rounds)
    above = sum(x["censored"] == "above" for x in rounds)
    untestable = sum(x["censored"] == "untestable" for x in rounds)
    entry: dict[str, Any] = {
        "rung": name, "rounds": rounds, "estimate": est.estimate,
        # a round below the search has no lower bound, one at its top no upper bound; the
        # true capacities lie up to a grid step above what passed
        "lo": est.lo if not below else None,
        "hi": est.hi * math.exp(step) if est.hi is not None and not above else None,
        "n": est.n, "censored": {"below": below, "above": above, "untestable": untestable}}
    entry["text"] = _capacity_text(entry, spec, dim)
    if not est.estimate:
        return entry
    # at the search's top the capacity is a lower bound, and so is its throughput (its cost an
    # upper one); below the search the other way round
    more, less, both = {(True, False): ("≥ ", "≤ ", ""), (False, True): ("≤ ", "≥ ", ""),
                        (True, True): ("", "", " (censored both ways)")}.get(
                            (bool(above), bool(below)), ("", "", ""))
    tps = stats.ratio_ci([x["output_tokens_per_s"] for x in rounds
                          if x["output_tokens_per_s"]], conf).estimate
    if not tps:
        return entry
    entry["output_tokens_per_s"] = tps
    entry["tps_text"] = f"{more}{tps:.1f}{both}"
    if price:
        usd = float(price["usd_per_hour"]) / (tps * 3600) * 1e6
        entry["usd_per_mtok"] = usd
        entry["usd_text"] = f"{less}{usd:.2f}{both}"
    return entry


def capacity(doc: Mapping[str, Any], ladder: Sequence[str], control: str | None,
             twin: str | None, stats_cfg: Mapping[str, Any],
             price: Mapping[str, Any] | None = None, dim: str = "rate"
             ) -> dict[str, Any] | None:
    """Each rung's serving capacity (``load._capacity``, once per round on its own
    server), by request rate or (``dim`` "concurrency") by concurrent streams: per round the
    highest value within the SLO target; across rounds their geometric mean with its
    t-interval, widened by the grid it was read off (a round's rate capacity is only known to
    lie in [found, found x resolution), its stream count in [k, k + 1): ``grid_step``); judged
    between rungs like a bench cell (paired by round, higher is better), every comparison's
    rounds carrying their readings' spread within the grid and its estimate shrunk by the
    grid's step before the test (``stats.verdict``'s ``bias``: a call needs the ratio beyond the
    threshold by more than the search can resolve); the attainment curve (every probe pooled per rung and value, Wilson intervals);
    $ per million output tokens at the capacity when the host has a price."""
    d = DIMS[dim]
    rows = [r for r in doc["levels"] if r["kind"] == "capacity" and r.get(d["row"])]
    if not rows:
        return None
    spec = doc["spec"]["capacity"]
    res = _resolution(spec, dim)
    conf = float(stats_cfg["confidence"])
    names = [n for n in list(ladder) + ([control] if control else [])
             if any(r["rung"] == n for r in rows)]
    per_rung = [_rung_capacity(n, [r for r in rows if r["rung"] == n], spec,
                               conf, price, dim) for n in names]
    samples = [{"rung": r["rung"], "round": r["round"], "order": r["order"], "warmup": False,
                "build_key": r["build_key"], "tokens_per_s": value}
               for r in rows if r["rung"] in names
               for value in [_capacity_value(r[d["row"]])[0]] if value]
    pseudo = {"quant": doc["quant"], "workload": f"capacity ({d['what']})",
              "threads": doc["threads"], "samples": samples,
              "workload_spec": {"n_prompt": doc["spec"]["n_prompt"], "n_gen": 0}}
    cell = stats.summarize(pseudo, ladder, control, twin, stats_cfg, confidence=conf)
    _aa_on_the_grid(cell, pseudo, stats_cfg, res)
    words = {e["rung"]: censored_words(e) for e in per_rung}
    by_rung = {e["rung"]: [x[d["value"]] for x in e["rounds"] if x[d["value"]]]
               for e in per_rung}
    for comp in cell["steps"] + cell["vs_floor"]:
        # the grid's step: the estimate shrunk and the interval widened by it (a call needs
        # the ratio beyond the threshold by more than the search resolves), and each round's
        # ratio carrying its readings' spread within their steps (never a zero-width interval)
        step = grid_step(by_rung.get(comp["base"], []) + by_rung.get(comp["rung"], []), res)
        if step > 0:
            r = comp["ratio"]
            comp["ratio"] = asdict(stats.ratio_ci(r["per_round"], r["confidence"],
                                                  stats.cell_factor(pseudo, stats_cfg),
                                                  grid_sd(step)))
            comp["bias_why"] = "the search's resolution" + (
                " and the failed control check" if comp.get("bias") else "")
            comp["bias"] = (comp.get("bias") or 0.0) + step
        out_of_range = [words[n] for n in (comp["base"], comp["rung"]) if words.get(n)]
        if out_of_range:
            # clamped to the search's range, a ratio only moves toward 1: a call stands, an
            # equivalence would claim what the search could not see
            comp["censored"] = "; ".join(out_of_range)
            comp["no_equivalence"] = (comp["censored"] + ": values outside the search only "
                                      "hide differences")
        comp["verdict"] = stats.judge(comp)
    curve = attainment_curve(rows, names, conf, dim)
    for e in per_rung:
        e["at_capacity"] = attainment_at(curve.get(e["rung"], []), e.get("estimate"), d["x"],
                                         steady.p0_of(spec))
        e["probe_counts"] = probe_counts([r for r in rows if r["rung"] == e["rung"]], d["row"])
    out = {"dimension": dim, "what": d["what"], "value_key": d["value"],
           "target": spec["target"], "limits": doc["spec"]["limits"],
           "requests_per_probe": spec["requests"], "resolution": res,
           "search": {k: spec.get(k) for k in d["search"]},
           "rule": probe_rule(spec, rows, d["row"]),
           "rungs": per_rung, "cell": cell, "curve": curve,
           "latency": probe_latency(doc, rows, names, d["row"], d["x"]),
           "price": dict(price) if price else None}
    out["method_text"] = capacity_method(out, int(doc.get("slots") or 1))
    return out


def _limits_words(limits: Mapping[str, Any]) -> str:
    return ", ".join(f"{k[:-3].upper()} ≤ {v:g} ms" for k, v in limits.items() if v) \
        or "no limit"


def capacity_method(cap: Mapping[str, Any], slots: int) -> str:
    """How the capacity was searched and when a probe passes, in words (the report's paragraph
    above the capacity table)."""
    s, rule = cap["search"], cap["rule"]
    oc = "; ".join(
        f"with {o['n']} measured requests (at least {o['least_good']} good) it passes with "
        + ", ".join(f"{float(v) * 100:.0f} % at an attainment of {float(p) * 100:g} %"
                    for p, v in o["pass_probability"].items()) if o["least_good"] is not None
        else f"with {o['n']} measured requests it can never pass" for o in rule["oc"])
    test = (f"a probe passes when its attainment (the share of its measured requests within "
            f"{_limits_words(cap['limits'])}) is shown above {rule['p0'] * 100:g} % (the target "
            f"{rule['target'] * 100:g} % less its tolerance) by a one-sided exact binomial test "
            f"at α = {rule['alpha']:g}: at most {rule['alpha'] * 100:g} % of probes pass at "
            f"{rule['p0'] * 100:g} %" + (f" ({oc})" if oc else ""))
    if cap["dimension"] == "rate":
        return (f"The highest request rate (open loop, Poisson arrivals, a fresh seeded draw per "
                f"probe) that a probe sustains, searched in every round on each rung's server. "
                f"Each probe is sized by its server's own service time (prefill + decode of one "
                f"request with all {slots} slot(s) busy, measured at its warm-up): the first "
                f"{s['warmup_services']:g} service times of arrivals are a warm-up, sent and "
                f"kept but never judged, then at least {s['measure_services']:g} service times "
                f"of arrivals are measured; a probe that would take over {s['probe_max_s']:g} s "
                f"is not run (that rate is untestable within the bound and counts as not "
                f"passed). {test[0].upper() + test[1:]}; and only with a flat backlog: its "
                f"measured window's departures not significantly fewer than its arrivals "
                f"(Poisson, α = {rule['alpha']:g}) and the requests in the system grown by no "
                f"more than the slots from its first quarter to its last. A probe whose client "
                f"fell behind its schedule is set aside and run again. "
                + (f"The first search starts at {float(s['start_from_service']) * 100:g} % of the "
                   f"rate the server's warm-up service time gives (slots / service time) and "
                   f"walks 1, 2, 4, ... steps of the grid {s['start_rps']:g}/s x "
                   f"{cap['resolution']:.2f}^k from there until a rate passes and the next "
                   f"fails (down to {s['min_rps']:g}/s, up to {s['max_rps']:g}/s), then bisects"
                   if s.get("start_from_service") else
                   f"The search doubles from {s['start_rps']:g}/s (halving if it fails, down to "
                   f"{s['min_rps']:g}/s; up to {s['max_rps']:g}/s), then bisects the bracket "
                   f"{s['bisect']} time(s)")
                + f", so a round's capacity is resolved to {cap['resolution']:.2f}x"
                + (" (a later round starts at the rung's earlier capacity and walks 1, 2, 4, "
                   "... steps of that grid until a rate passes and the next fails, then "
                   "bisects)" if s.get("warm_start") else "")
                + "; the interval is the rounds' t-interval widened by that resolution, and "
                  "every comparison's interval and test carry it too.")
    return (f"The most concurrent streams (closed loop: each client sends its next request when "
            f"its last one finished) a probe sustains, on the same server with its {slots} "
            f"slot(s) (streams beyond them queue there, as in vLLM's max-concurrency sweeps): a "
            f"probe of n streams discards its first wave (n requests arriving at once) and "
            f"measures at least {int(s['waves']) - 1} x n more; {test}. Searched in every round: "
            f"1, 2, 4, ... streams up to {s['max_streams']} until one fails, then bisected to "
            f"one stream" + (" (a later round starts at the rung's earlier capacity)"
                             if s.get("warm_start") else "")
            + ". k streams passing and k + 1 failing puts the capacity in [k, k + 1): every "
              "interval and comparison carries that step (widest at the smallest count). "
              "Output tok/s and the cost are what the passing probes at the capacity measured.")


def _aa_on_the_grid(cell: dict[str, Any], pseudo: Mapping[str, Any],
                    stats_cfg: Mapping[str, Any], res: float) -> None:
    """The A/A pair's interval and check carry the grid's step too (their equal readings
    gave a zero-width interval: issue 59, item 3), as every comparison's does."""
    nf = cell.get("noise_floor") or {}
    ct = nf.get("control_vs_twin")
    if not ct or len(ct.get("per_round") or []) < 2:
        return
    values = [float(x["tokens_per_s"]) for x in pseudo["samples"]
              if x["rung"] in (nf["control"], nf["twin"])]
    step = grid_step(values, res)
    if step <= 0:
        return
    r = stats.ratio_ci(ct["per_round"], ct["confidence"], stats.cell_factor(pseudo, stats_cfg),
                       grid_sd(step))
    aa = stats.aa_figures(r, nf["threshold"])
    nf.update(control_vs_twin=asdict(r), aa=aa, control_check=stats.control_check(r),
              floor=aa["smallest_callable"] if aa else None,
              text=wording.aa_text(aa, nf["control"], nf["twin"]) + " (the search's grid "
              "carried)")


def probe_rule(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], key: str
               ) -> dict[str, Any]:
    """The probes' pass rule and its error rates (``planning/steady``): the attainment test's
    null (target - tolerance), its α, and its pass probability at the null, the target and
    above, for the fewest and the most measured requests any probe had."""
    p0, alpha = steady.p0_of(spec), float(spec["alpha"])
    ns = sorted({int(p["requests"]) for r in rows for p in r[key]["probes"]
                 if p.get("testable", True) and p.get("requests")})
    hi = min(0.999, float(spec["target"]) + float(spec["tolerance"]))
    at = [p0, float(spec["target"]), hi]
    oc = [{"n": n, "least_good": steady.least_good(n, p0, alpha),
           "pass_probability": {f"{p:.3g}": steady.pass_probability(n, p, p0, alpha)
                                for p in at}} for n in ns[:1] + ns[-1:] if n] if ns else []
    return {"target": spec["target"], "tolerance": spec["tolerance"], "alpha": alpha,
            "p0": p0, "oc": oc[:1] if len(ns) == 1 else oc}


def attainment_at(curve: Sequence[Mapping[str, Any]], estimate: float | None, x: str,
                  p0: float) -> dict[str, Any] | None:
    """The pooled attainment (every probe of every round, passed or not) at the probed value
    nearest the capacity estimate from below, with its Wilson interval; ``holds``: its lower
    bound reaches target - tolerance (issue 59's check that a capacity is what it claims)."""
    if not estimate:
        return None
    below = [pt for pt in curve if pt[x] <= estimate * (1 + 1e-6) and pt["requests"]]
    if not below:
        return None
    pt = max(below, key=lambda q: q[x])
    holds = bool(pt["ci"] and pt["ci"][0] >= p0 - 1e-12)
    unit = "/s" if x == "rate" else " streams"
    text = (f"{pt['attainment'] * 100:.0f} % ({pt['ci'][0] * 100:.0f}-{pt['ci'][1] * 100:.0f} %)"
            f" of {pt['requests']} at {pt[x]:.3g}{unit}") if pt["ci"] else "-"
    if not holds:
        text += f" (**its lower bound is under {p0 * 100:g} %**)"
    return {**pt, "holds": holds, "text": text}


def probe_counts(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, int]:
    """A rung's probes: run (and judged), not run (untestable within probe_max_s), discarded
    (the client fell behind; each re-run) and failed for a growing backlog alone."""
    probes = [p for r in rows for p in r[key]["probes"]]
    return {"judged": sum(1 for p in probes if p.get("testable", True)
                          and not p.get("discarded")),
            "untestable": sum(1 for p in probes if p.get("testable") is False),
            "discarded": sum(1 for p in probes if p.get("discarded")),
            "backlog": sum(1 for p in probes if not p.get("discarded")
                           and (p.get("judged") or {}).get("why") in ("departures", "backlog"))}


def probe_latency(doc: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
                  names: Sequence[str], key: str, x: str) -> list[dict[str, Any]]:
    """Per rung and probed value: p50/p99 TTFT and TPOT over the measured requests of every
    judged probe at it (warm-ups and discarded probes left out), beside its attainment and how
    many of its probes passed."""
    out = []
    limits = doc["spec"]["limits"]
    # each probe's measured requests, indexed once (not a scan of every request per probe)
    measured: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for q in doc["requests"]:
        if q.get("window") == "measured":
            measured.setdefault((q["rung"], q["round"], q.get("attempt"), q["level"],
                                 q.get("probe")), []).append(q)
    for n in names:
        by_x: dict[float, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
        for r in rows:
            if r["rung"] != n:
                continue
            for i, p in enumerate(r[key]["probes"]):
                if p.get("testable", True) and not p.get("discarded"):
                    by_x.setdefault(float(f"{p[x]:.4g}"), []).append((r, {**p, "index": i}))
        for v in sorted(by_x):
            got = by_x[v]
            recs = [q for r, p in got for q in measured.get(
                (r["rung"], r["round"], r.get("attempt"), p["level"], p["index"]), [])]
            sm = load_client.summarize(recs, 1.0, limits) if recs else {}
            out.append({"rung": n, x: v, "probes": len(got),
                        "passed": sum(1 for _, p in got if p["passed"]),
                        "requests": len(recs), "good": sm.get("good"),
                        **{k: sm.get(k) for k in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                                                  "tpot_p99_ms")}})
    return out


def censored_words(entry: Mapping[str, Any]) -> str:
    """"`floor` below the search (0.125/s) in 2 of 3 rounds", or "" when no round was."""
    c, n = entry["censored"], len(entry["rounds"])
    words = [f"{k} of {n} round(s) {what}" for k, what in
             ((c["below"], "below the search"), (c["above"], "at the search's top"),
              (c.get("untestable", 0), "untestable within probe_max_s")) if k]
    return f"`{entry['rung']}` " + " and ".join(words) if words else ""


def _capacity_text(entry: Mapping[str, Any], spec: Mapping[str, Any], dim: str = "rate"
                   ) -> str:
    """"2.38 (2.38-2.83)"; "≥ 16 (every round at the search's top)"; "< 0.125 (...)"."""
    est, lo, hi = entry["estimate"], entry["lo"], entry["hi"]
    c, n = entry["censored"], len(entry["rounds"])
    if est is None:
        return (f"untestable (every round's probes would take over {spec['probe_max_s']:g} s "
                "at its service time: not measured)") if c.get("untestable") else "-"
    if c["above"] == n:
        return f"≥ {float(spec[DIMS[dim]['top']]):.3g} (every round at the search's top)"
    if c["below"] == n:
        return f"< {est:.3g} (every round below the search)"
    if lo is None and hi is None:
        return f"{est:.3g} (rounds below and at the top of the search: no interval)"
    if c.get("untestable"):
        # the rounds measured only: a round that could not be tested is no reading
        return (f"{est:.3g} ({lo or est:.3g}-{hi or est:.3g}; {c['untestable']} of {n} "
                "round(s) untestable within probe_max_s, left out)")
    if lo is None:
        return f"{est:.3g} (up to {hi:.3g}; {c['below']} round(s) below the search)"
    if hi is None:
        return f"{est:.3g} (from {lo:.3g}; {c['above']} round(s) at the search's top)"
    return f"{est:.3g} ({lo:.3g}-{hi:.3g})"


def attainment_curve(rows: Sequence[Mapping[str, Any]], names: Sequence[str],
                     confidence: float, dim: str = "rate") -> dict[str, list[dict[str, Any]]]:
    """SLO attainment against the offered rate (or streams) per rung: every probe of every
    round pooled by its value (the doubling values recur in every round; a bisection's
    rarely), over the requests sent (a probe ends once it can no longer pass), with a Wilson
    interval on the share (scipy's binomtest)."""
    d = DIMS[dim]
    out: dict[str, list[dict[str, Any]]] = {}
    for n in names:
        by_x: dict[float, list[int]] = {}
        for r in rows:
            if r["rung"] != n:
                continue
            for p in r[d["row"]]["probes"]:
                if p.get("testable") is False or p.get("discarded"):
                    continue  # never run, or set aside (its client fell behind)
                k = float(f"{p[d['x']]:.4g}")
                got = by_x.setdefault(k, [0, 0])
                got[0] += int(p["good"])
                got[1] += int(p.get("sent", p["requests"]))  # a decided probe's unsent: unknown
        pts = []
        for x in sorted(by_x):
            good, total = by_x[x]
            ci = binomtest(good, total).proportion_ci(confidence, method="wilson") \
                if total else None
            pts.append({d["x"]: x, "good": good, "requests": total,
                        "attainment": good / total if total else None,
                        "ci": [float(ci.low), float(ci.high)] if ci else None})
        out[n] = pts
    return out


def capacity_sentences(cap: Mapping[str, Any] | None) -> list[str]:
    """The called capacity comparisons in words ("`native_repack` sustains K.KKx `floor`'s
    request rate within the SLO (...)"), after the run's multiplicity step."""
    if not cap:
        return []
    rule = cap.get("rule") or {}
    slo = (f"an attainment shown above {rule['p0'] * 100:g} % (target {cap['target'] * 100:g} %)"
           if rule else f"{cap['target'] * 100:g} % of requests") + \
        f" within {_limits_words(cap['limits'])}"
    out = []
    for comp in cap["cell"]["vs_floor"] + [s for s in cap["cell"]["steps"]
                                           if s not in cap["cell"]["vs_floor"]]:
        v, r = comp["verdict"], comp["ratio"]
        if v["call"] not in ("faster", "slower") or r["estimate"] is None:
            continue
        line = (f"`{comp['rung']}` sustains {wording.fmt_ratio(r['estimate'])} `{comp['base']}`'s "
                f"{cap.get('what', 'request rate')} at {slo} ({v['text']})"
                + (f"; censored rounds only pull it toward 1x: {comp['censored']}"
                   if comp.get("censored") else ""))
        if line not in out:
            out.append(line)
    return out


DEFINITIONS = ("TTFT: request sent to first streamed token; TPOT: (end to end - TTFT) / (output "
               "tokens - 1); ITL: every gap between streamed tokens; E2EL: sent to last chunk "
               "(vLLM's definitions, client clock). Throughput and goodput over the level's "
               "duration; goodput counts requests that completed within every configured limit. "
               "A failed or timed-out request counts as infinitely slow in the percentiles "
               "(aiperf's adjusted percentiles) and never as good; where a row has failures, "
               "vLLM's success-only percentiles (over the completed requests) are listed below "
               "the table.")


def success_only(table: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows with failed, timed-out or unsent requests, with their success-only (vLLM's)
    percentiles: beside the adjusted ones, what the requests that completed saw."""
    out = []
    for r in table:
        p = r["pooled"]
        if p["completed"] == p["requests"]:
            continue
        out.append({"level": r["level"], "rung": r["rung"], "completed": p["completed"],
                    "requests": p["requests"],
                    **{f"{m}_ok_p{q}_ms": p.get(f"{m}_ok_p{q}_ms")
                       for m in ("ttft", "tpot", "e2el") for q in load_client.PERCENTILES}})
    return out


def _metrics_peaks(doc: Mapping[str, Any], rung: str, level: str) -> dict[str, Any]:
    rows = [r["server_metrics"] for r in doc["levels"]
            if r["rung"] == rung and r["level"] == level]
    keys = ("requests_deferred_max", "requests_processing_max", "n_busy_slots_per_decode_max")
    return {k: max((r.get(k) or 0) for r in rows) for k in keys}


def _turns(doc: Mapping[str, Any], rung: str, level: str) -> list[dict[str, Any]]:
    """Per turn: TTFT (median over rounds and conversations) and the prefix the server reused
    (cache_n of cache_n + prompt_n, from its timings)."""
    out = []
    recs = [r for r in doc["requests"] if r["rung"] == rung and r["level"] == level]
    for t in sorted({r["turn"] for r in recs if r.get("turn") is not None}):
        ts = [r for r in recs if r["turn"] == t]
        ok = [r for r in ts if r["status"] == "ok"]
        ttft = sorted(r["ttft_ms"] for r in ok)
        cache = [r["check"]["cache_n"] or 0 for r in ok if r.get("check")]
        prompt = [r["check"]["prompt_n"] or 0 for r in ok if r.get("check")]
        out.append({"turn": t, "requests": len(ts), "failed": len(ts) - len(ok),
                    "prompt_tokens": max((r["prompt_tokens"] for r in ts), default=None),
                    "ttft_median_ms": ttft[len(ttft) // 2] if ttft else None,
                    "reused": (sum(cache) / (sum(cache) + sum(prompt)))
                    if (sum(cache) + sum(prompt)) else None})
    return out


def _cache_lever(doc: Mapping[str, Any], names: Sequence[str],
                 stats_cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Prompt caching on vs off, per rung: the agent's later turns' TTFT (the turns that can
    reuse a prefix), paired by round; judged with the prefill threshold."""
    out = []
    conf = stats_cfg["confidence"]
    delta = stats.threshold_for(stats_cfg.get("threshold"), "prefill")
    for n in names:
        per: dict[str, dict[int, float]] = {}
        for lv in ("agent-cache", "agent-nocache"):
            for rnd in sorted({r["round"] for r in doc["levels"] if r["rung"] == n}):
                vals = [r["ttft_ms"] for r in doc["requests"]
                        if r["rung"] == n and r["level"] == lv and r["round"] == rnd
                        and r.get("turn") and r["status"] == "ok" and r["ttft_ms"]]
                if vals:
                    per.setdefault(lv, {})[rnd] = float(sum(vals) / len(vals))
        on, off = per.get("agent-cache", {}), per.get("agent-nocache", {})
        ratios = [off[r] / on[r] for r in sorted(set(on) & set(off)) if on[r] > 0]
        est = stats.ratio_ci(ratios, conf)
        out.append({"rung": n, "ratio": asdict(est),
                    "verdict": asdict(stats.verdict(est, delta))})
    return out


def sentences(section: Mapping[str, Any]) -> list[str]:
    """The judged comparisons in words: "at c2, `native_repack`'s p99 TTFT is 3.10x lower than
    `floor`'s (95 % CI ...)"; only the called ones, each with its interval."""
    out = []
    for c in section["cells"]:
        for comp in c["cell"]["vs_floor"] + [s for s in c["cell"]["steps"]
                                             if s not in c["cell"]["vs_floor"]]:
            v, r = comp["verdict"], comp["ratio"]
            if v["call"] not in ("faster", "slower") or r["estimate"] is None:
                continue
            word = "lower" if v["call"] == "faster" else "higher"
            ratio = r["estimate"] if v["call"] == "faster" else 1 / r["estimate"]
            # the verdict's text carries the interval at the level it is shown (after the run's
            # multiplicity step: the false-coverage-adjusted one)
            line = (f"at {_level_words(c['level'])}, `{comp['rung']}`'s {c['label']} is "
                    f"{wording.fmt_ratio(ratio)} {word} than `{comp['base']}`'s (as a rate: "
                    f"{v['text']})")
            if line not in out:
                out.append(line)
    return out


def _level_words(level: str) -> str:
    if level.startswith("c"):
        n = int(level[1:])
        return f"{n} stream{'s' if n != 1 else ''}"
    if level.startswith("r"):
        return f"{level[1:]} request{'' if level[1:] == '1' else 's'}/s (Poisson)"
    return level


def judged(load: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The load's judged cells, for the serving family's multiplicity step: each level's
    latency cells and the two capacities'."""
    return ([c["cell"] for c in load["cells"]]
            + [cap["cell"] for cap in (load.get(k) for k in ("capacity", "concurrency_capacity"))
               if cap])


def finish(load: dict[str, Any]) -> None:
    """Its sentences, which read the verdicts after the run's multiplicity step."""
    load["sentences"] = sentences(load)
    load["capacity_sentences"] = capacity_sentences(load.get("capacity"))
    load["concurrency_sentences"] = capacity_sentences(load.get("concurrency_capacity"))
