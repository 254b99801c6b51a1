"""The report's view of serving under load (``measuring/server_load`` measures it): each level's
requests pooled per rung, per-round percentiles with intervals, p50/p99 TTFT and TPOT judged per
level like a bench cell, the agent's turns, the prompt-caching lever, and the sentences."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from scipy.stats import binomtest

from ladder.measuring import load_client
from ladder.analysis import stats, wording

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
            "spec": doc["spec"], "slots": doc["slots"], "cpus": doc.get("cpus"),
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
        svc = service_ms(doc, e["rung"], light["level"]) if light else None
        predicted = int(doc.get("slots") or 1) * 1000.0 / svc if svc else None
        above = bool(sat and e.get("estimate") and e["estimate"] > sat)
        e.update(saturation_rps=sat, service_ms=svc, predicted_rps=predicted,
                 above_saturation=above)
        if sat is None and predicted is None:
            continue
        text = (f"`{e['rung']}`: capacity {e['estimate']:.3g} req/s" if e.get("estimate")
                else f"`{e['rung']}`: no capacity")
        parts = []
        if sat is not None:
            parts.append(f"saturation {sat:.3g} req/s (closed loop, the most any level "
                         "completed)")
        if predicted is not None:
            parts.append(f"{predicted:.3g} req/s from its server's own service time "
                         f"({svc:.0f} ms of prefill and decode per request at "
                         f"{light['level'] if light else '-'}, {doc.get('slots')} slot(s))")
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


# The two searches of a capacity row (``server_load._capacity``): its key in the row, the key of a
# round's value, the words, a probe's value, the search's top and the settings that define it
# (the resolution: ``_resolution``; streams are bisected to one stream, a grid of their own:
# ``grid_step``)
DIMS: dict[str, dict[str, Any]] = {
    "rate": {"row": "capacity", "value": "capacity_rps", "what": "request rate", "x": "rate",
             "top": "max_rps",
             "search": ("probe_s", "start_rps", "min_rps", "max_rps", "bisect", "warm_start")},
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
        return hi, "below"
    return lo, ("above" if found["bound"] == "above" else None)


def _at_capacity(found: Mapping[str, Any], dim: str) -> float | None:
    """Output tokens/s measured by the round's highest passing concurrency probe (at a rate
    capacity it follows from the rate: ``_rung_capacity``)."""
    passed = [p for p in found.get("probes", []) if p.get("passed") and p.get(DIMS[dim]["x"])
              == found["bracket"][0]]
    return passed[-1].get("output_tokens_per_s") if passed else None


def _rung_capacity(name: str, rows: Sequence[Mapping[str, Any]], spec: Mapping[str, Any],
                   n_gen: int, conf: float, price: Mapping[str, Any] | None, dim: str = "rate"
                   ) -> dict[str, Any]:
    """One rung's capacity over its rounds: the geometric mean, its interval widened by the
    resolution (open on a side a censored round leaves unbounded), output tok/s and $ per
    million output tokens at it (at a rate: rate x n_gen; at a concurrency: what its passing
    probes measured), each printed as the bound it is when rounds were censored."""
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
                       "output_tokens_per_s": _at_capacity(found, dim) if dim != "rate"
                       else None})
    values = [x[d["value"]] for x in rounds if x[d["value"]]]
    step = grid_step(values, res)
    est = stats.ratio_ci(values, conf, grid_sd=grid_sd(step, 1))
    below = sum(x["censored"] == "below" for x in rounds)
    above = sum(x["censored"] == "above" for x in rounds)
    entry: dict[str, Any] = {
        "rung": name, "rounds": rounds, "estimate": est.estimate,
        # a round below the search has no lower bound, one at its top no upper bound; the
        # true capacities lie up to a grid step above what passed
        "lo": est.lo if not below else None,
        "hi": est.hi * math.exp(step) if est.hi is not None and not above else None,
        "n": est.n, "censored": {"below": below, "above": above}}
    entry["text"] = _capacity_text(entry, spec, dim)
    if not est.estimate:
        return entry
    # at the search's top the capacity is a lower bound, and so is its throughput (its cost an
    # upper one); below the search the other way round
    more, less, both = {(True, False): ("≥ ", "≤ ", ""), (False, True): ("≤ ", "≥ ", ""),
                        (True, True): ("", "", " (censored both ways)")}.get(
                            (bool(above), bool(below)), ("", "", ""))
    if dim == "rate":
        tps: float | None = est.estimate * float(n_gen)
    else:
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
    """Each rung's serving capacity (``server_load._capacity``, once per round on its own
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
                               doc["spec"]["n_gen"], conf, price, dim) for n in names]
    samples = [{"rung": r["rung"], "round": r["round"], "order": r["order"], "warmup": False,
                "build_key": r["build_key"], "tokens_per_s": value}
               for r in rows if r["rung"] in names
               for value in [_capacity_value(r[d["row"]])[0]] if value]
    pseudo = {"quant": doc["quant"], "workload": f"capacity ({d['what']})",
              "threads": doc["threads"], "samples": samples,
              "workload_spec": {"n_prompt": doc["spec"]["n_prompt"], "n_gen": 0}}
    cell = stats.summarize(pseudo, ladder, control, twin, stats_cfg, confidence=conf)
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
    return {"dimension": dim, "what": d["what"], "value_key": d["value"],
            "target": spec["target"], "limits": doc["spec"]["limits"],
            "requests_per_probe": spec["requests"], "resolution": res,
            "search": {k: spec.get(k) for k in d["search"]},
            "rungs": per_rung, "cell": cell, "curve": attainment_curve(rows, names, conf, dim),
            "price": dict(price) if price else None}


def censored_words(entry: Mapping[str, Any]) -> str:
    """"`floor` below the search (0.125/s) in 2 of 3 rounds", or "" when no round was."""
    c, n = entry["censored"], len(entry["rounds"])
    words = [f"{k} of {n} round(s) {what}" for k, what in
             ((c["below"], "below the search"), (c["above"], "at the search's top")) if k]
    return f"`{entry['rung']}` " + " and ".join(words) if words else ""


def _capacity_text(entry: Mapping[str, Any], spec: Mapping[str, Any], dim: str = "rate"
                   ) -> str:
    """"2.38 (2.38-2.83)"; "≥ 16 (every round at the search's top)"; "< 0.125 (...)"."""
    est, lo, hi = entry["estimate"], entry["lo"], entry["hi"]
    if est is None:
        return "-"
    c, n = entry["censored"], len(entry["rounds"])
    if c["above"] == n:
        return f"≥ {float(spec[DIMS[dim]['top']]):.3g} (every round at the search's top)"
    if c["below"] == n:
        return f"< {est:.3g} (every round below the search)"
    if lo is None and hi is None:
        return f"{est:.3g} (rounds below and at the top of the search: no interval)"
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
    limits = ", ".join(f"{k[:-3].upper()} ≤ {v:g} ms" for k, v in cap["limits"].items() if v)
    slo = f"{cap['target'] * 100:g} % of requests within {limits or 'no limit'}"
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
