"""Serving under load: llama-server per rung, driven by ``ladder.loadgen``, rungs taking turns
within shuffled rounds like the bench, and the report's view of it judged with ``ladder.stats``.

Per round and rung: one server (``slots`` parallel sequences, the rung's binary, the cell's CPU
set, read back from /proc), warmed with one request per slot, then each level in turn:
closed-loop concurrency levels, open-loop Poisson rates, and the agent workload (multi-turn
conversations on a growing prefix) with prompt caching on and off. Every request's record and the
server's /metrics samples are kept; the analysis (``summarize_load``) reads only those.
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder import loadgen, progress, stats
from ladder.bench import built_rungs, cell_seed, check_placement, round_orders
from ladder.errors import LadderError
from ladder.io import atomic_write_json, atomic_write_text, read_json
from ladder.machine import cpu_set, host_brief, task_cpus
from ladder.server import PortTaken, Server, llama_server

FORMAT = "ladder-serving-load/1"
METHOD = ("llama-server (--metrics) per rung and round on the cell's CPU set, warmed with one "
          "request per slot; the client (ladder.loadgen, aiohttp) streams /completion with "
          "token-ID prompts and times every token on its own clock; TTFT, TPOT, ITL and E2EL "
          "as vLLM's serving benchmark defines them; closed loop: N clients each sending its "
          "next request when the last one finished; open loop: Poisson arrivals")
# what the report judges per level, with the threshold phase each belongs to
JUDGED = {"ttft_p50_ms": "prefill", "ttft_p99_ms": "prefill",
          "tpot_p50_ms": "decode", "tpot_p99_ms": "decode"}
LABELS = {"ttft_p50_ms": "p50 TTFT", "ttft_p99_ms": "p99 TTFT", "tpot_p50_ms": "p50 TPOT",
          "tpot_p99_ms": "p99 TPOT"}


def levels(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The levels of one round, in the order they run."""
    out: list[dict[str, Any]] = [{"level": f"c{c}", "kind": "closed", "concurrency": int(c)}
                                 for c in cfg["concurrency"]]
    out += [{"level": f"r{r:g}", "kind": "open", "rate": float(r)} for r in cfg["rates"]]
    agent = cfg.get("agent") or {}
    if agent.get("enabled"):
        out += [{"level": f"agent-{'cache' if c else 'nocache'}", "kind": "agent", "cache": c}
                for c in (True, False)]
    return out


def slots_for(cfg: Mapping[str, Any]) -> int:
    agent = cfg.get("agent") or {}
    return max([int(c) for c in cfg["concurrency"]]
               + ([int(agent["conversations"])] if agent.get("enabled") else []) + [1])


def ctx_for(cfg: Mapping[str, Any]) -> int:
    """-c: every slot holds the longest request (llama-server splits -c among slots)."""
    agent = cfg.get("agent") or {}
    per = cfg["n_prompt"] + cfg["n_gen"]
    if agent.get("enabled"):
        per = max(per, agent["turns"] * (agent["turn_tokens"] + agent["n_gen"]))
    return slots_for(cfg) * (per + 16)


def _body(cfg: Mapping[str, Any], seed: int) -> loadgen.Body:
    def make(i: int) -> dict[str, Any]:
        rng = random.Random(cell_seed(seed, f"request/{i}"))
        return {"prompt": loadgen.prompt_ids(rng, cfg["n_prompt"]), "n_predict": cfg["n_gen"],
                "ignore_eos": True, "temperature": 0, "cache_prompt": False}
    return make


def run_level(srv: Server, lv: Mapping[str, Any], cfg: Mapping[str, Any], seed: int
              ) -> tuple[list[loadgen.Request], float, list[dict[str, float]]]:
    """One level against a running server; its requests, duration and /metrics samples."""
    timeout, max_s = float(cfg["request_timeout_s"]), float(cfg["level_max_s"])
    body = _body(cfg, cell_seed(seed, lv["level"]))
    if lv["kind"] == "closed":
        work = loadgen.closed_loop(srv.url, lv["level"], body, concurrency=lv["concurrency"],
                                   requests=cfg["requests"], timeout_s=timeout, max_s=max_s)
    elif lv["kind"] == "open":
        work = loadgen.open_loop(srv.url, lv["level"], body, rate=lv["rate"],
                                 requests=cfg["requests"], seed=cell_seed(seed, "arrivals"),
                                 timeout_s=timeout, max_s=max_s)
    else:
        work = _agent(srv.url, lv, cfg["agent"], seed, timeout)
    (reqs, duration), seen = loadgen.run(
        loadgen.with_metrics(srv.url, float(cfg["metrics_every_s"]), work))
    return reqs, duration, seen


async def _agent(url: str, lv: Mapping[str, Any], acfg: Mapping[str, Any], seed: int,
                 timeout: float) -> tuple[list[loadgen.Request], float]:
    import asyncio
    import time

    t0 = time.perf_counter()
    convs = await asyncio.gather(*(loadgen.conversation(
        url, lv["level"], conv=c, turns=acfg["turns"], turn_tokens=acfg["turn_tokens"],
        n_gen=acfg["n_gen"], cache=lv["cache"], slot=c,
        seed=cell_seed(seed, f"conversation/{c}"), timeout_s=timeout)
        for c in range(acfg["conversations"])))
    return [r for conv in convs for r in conv], time.perf_counter() - t0


def alive(pid: int) -> bool:
    """The server process is still running (a zombie, reaped later, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def measure_load(*, rungs: Sequence[Mapping[str, Any]], model_meta: str,
                 settings: Mapping[str, Any], threads: int, rounds: int, seed: int,
                 raw_dir: str, out_json: str, cpus: Any = "auto", own_cpus: int | None = None,
                 port: int | None = None) -> dict[str, Any]:
    model = read_json(model_meta)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    cfg = settings["load"]
    quant = model["quant"].lower()
    active, status, bins = built_rungs(rungs, "serving load")
    by_name = {r["name"]: r for r in rungs}
    cpu_list = cpu_set(threads, cpus, job_cpus=own_cpus)
    client_cpus = _client_cpus(cpu_list)
    cell = f"load/{quant}/t{threads}"
    orders = round_orders(active, rounds, seed, cell)
    plan = levels(cfg)
    slots, ctx = slots_for(cfg), ctx_for(cfg)
    brief = host_brief()
    requests: list[dict[str, Any]] = []
    level_rows: list[dict[str, Any]] = []
    before = os.sched_getaffinity(0)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    try:
        for rnd, order in enumerate(orders):
            for pos, name in enumerate(order):
                if status[name]["status"] != "measured":
                    continue
                got = _one_server(
                    name=name, rung=by_name[name], bin_dir=bins[name], model=model["path"],
                    cfg=cfg, plan=plan, threads=threads, slots=slots, ctx=ctx, port=port,
                    cpu_list=cpu_list, seed=cell_seed(seed, f"{cell}/{rnd}"),
                    stem=raw / f"round{rnd:02d}-{pos:02d}-{name}", status=status[name],
                    where=f"{cell} {name} round {rnd}")
                for row in got["levels"]:
                    row.update(round=rnd, order=pos, rung=name,
                               build_key=status[name]["build_key"])
                    level_rows.append(row)
                for rec in got["requests"]:
                    rec.update(round=rnd, order=pos, rung=name)
                    requests.append(rec)
                progress.step("round", rnd + 1, len(orders), name, got["brief"])
    finally:
        os.sched_setaffinity(0, before)
    if not level_rows:
        raise LadderError("serving load: no rung's llama-server completed a level: "
                          + "; ".join(f"{n}: {st['reason']}" for n, st in status.items()))
    doc = {"format": FORMAT, "experiment": "load", "quant": quant, "threads": threads,
           "rounds": rounds, "seed": seed, "orders": orders, "spec": dict(cfg),
           "levels_planned": plan, "slots": slots, "ctx": ctx,
           "cpus": ",".join(map(str, cpu_list)) if cpu_list else None,
           "client_cpus": ",".join(map(str, client_cpus)) if client_cpus else None,
           "host": brief, "rungs": status, "levels": level_rows, "requests": requests,
           "method": METHOD}
    atomic_write_json(out_json, doc)
    return doc


def _client_cpus(server_cpus: Sequence[int] | None) -> list[int] | None:
    """The load generator runs beside the server's CPUs where the host has others (on a host
    with no spare CPU it shares them, as any client on that host would)."""
    if not server_cpus:
        return None
    rest = sorted(set(os.sched_getaffinity(0)) - set(server_cpus))
    return rest or None


def _one_server(*, name: str, rung: Mapping[str, Any], bin_dir: str, model: str,
                cfg: Mapping[str, Any], plan: Sequence[Mapping[str, Any]], threads: int,
                slots: int, ctx: int, port: int | None, cpu_list: list[int] | None, seed: int,
                stem: Path, status: dict[str, Any], where: str) -> dict[str, Any]:
    """One rung's server for one round: every level, every request kept; a server that does
    not start or dies is this rung's status, never the run's (a taken port is the machine's)."""
    log = f"{stem}.server.log"
    rows: list[dict[str, Any]] = []
    recs: list[dict[str, Any]] = []
    metrics_seen: dict[str, Any] = {}
    brief = "no level"
    try:
        with llama_server(bin_dir, model, threads=threads, ctx=ctx, log=log, port=port,
                          env=rung["env"], slots=slots, cpus=cpu_list,
                          args=[*rung["common_argv"], "--metrics", *cfg.get("server_args", [])],
                          ready_timeout_s=cfg["ready_timeout_s"]) as srv:
            warm = {**cfg, "requests": slots, "n_gen": min(2, cfg["n_gen"])}
            wreqs, _, _ = run_level(srv, {"level": "warmup", "kind": "closed",
                                          "concurrency": slots}, warm, seed)
            if any(r.status != "ok" for r in wreqs):
                raise LadderError("warmup failed: " + "; ".join(
                    str(r.error) for r in wreqs if r.status != "ok"))
            seen = sorted({c for cs in task_cpus(srv.pid).values() for c in cs})
            check_placement(seen or None, cpu_list, where)
            order = list(plan)
            for i, lv in enumerate(order):
                reqs, duration, mseen = run_level(srv, lv, cfg, seed)
                records = [r.record() for r in reqs]
                summary = loadgen.summarize(records, duration, cfg["limits"])
                metrics_seen[lv["level"]] = mseen
                rows.append({**lv, "duration_s": duration, "summary": summary,
                             "server_metrics": loadgen.metrics_brief(mseen),
                             "cpus_seen": seen})
                recs += records
                if not alive(srv.pid):
                    skipped = [x["level"] for x in order[i + 1:]]
                    raise LadderError(f"llama-server died during level {lv['level']} "
                                      f"({summary['failed'] + summary['timeout']} of "
                                      f"{summary['requests']} requests failed)"
                                      + (f"; not run: {', '.join(skipped)}" if skipped else ""))
            brief = ", ".join(f"{r['level']} p99 TTFT {_ms(r['summary']['ttft_p99_ms'])}"
                              for r in rows if r["kind"] != "agent")
    except PortTaken:
        raise
    except LadderError as exc:
        status.update(status="crashed" if rows else "failed", reason=str(exc), raw=log)
        brief = f"failed: {exc}"
    atomic_write_text(f"{stem}.json", json.dumps(
        {"levels": rows, "requests": recs, "metrics": metrics_seen}, indent=1,
        default=_json_safe))
    return {"levels": rows, "requests": recs, "brief": brief}


def _json_safe(x: Any) -> Any:
    return str(x)


def _ms(v: float | str | None) -> str:
    if v is None:
        return "-"
    return v if isinstance(v, str) else f"{v:.0f} ms"


# --- the report's view ---------------------------------------------------------------------------
def pooled(doc: Mapping[str, Any], rung: str, level: str) -> dict[str, Any] | None:
    """A rung's level over all rounds: every request pooled, durations summed."""
    rows = [r for r in doc["levels"] if r["rung"] == rung and r["level"] == level]
    if not rows:
        return None
    recs = [r for r in doc["requests"] if r["rung"] == rung and r["level"] == level]
    return loadgen.summarize(recs, sum(r["duration_s"] for r in rows), doc["spec"]["limits"])


def per_round(doc: Mapping[str, Any], rung: str, level: str, key: str) -> list[Any]:
    return [r["summary"][key] for r in doc["levels"]
            if r["rung"] == rung and r["level"] == level and r["summary"].get(key) is not None]


def metric_cell(doc: Mapping[str, Any], level: str, key: str, ladder: Sequence[str],
                control: str | None, twin: str | None, stats_cfg: Mapping[str, Any]
                ) -> dict[str, Any]:
    """One level's metric judged like a bench cell: per round and rung the latency as a rate
    (1000 / ms, so "faster" means lower latency), paired across rungs within rounds. A round in
    which a rung's percentile is "failed" (infinite) gives that rung no value there."""
    samples = []
    for r in doc["levels"]:
        v = r["summary"].get(key) if r["level"] == level else None
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            continue
        samples.append({"rung": r["rung"], "round": r["round"], "order": r["order"],
                        "warmup": False, "build_key": r["build_key"],
                        "tokens_per_s": 1000.0 / v})
    phase = JUDGED[key]
    spec = {"n_prompt": doc["spec"]["n_prompt"], "n_gen": 0} if phase == "prefill" else \
        {"n_prompt": 0, "n_gen": doc["spec"]["n_gen"]}
    pseudo = {"quant": doc["quant"], "workload": f"{level} {LABELS[key]}",
              "threads": doc["threads"], "samples": samples, "workload_spec": spec}
    return stats.summarize_cell(pseudo, ladder, control, twin,
                                confidence=stats_cfg["confidence"],
                                resamples=stats_cfg["bootstrap_resamples"],
                                seed=stats_cfg["seed"], thresholds=stats_cfg.get("threshold"))


def interval(values: Sequence[float], confidence: float) -> dict[str, Any]:
    """A per-round metric's geometric mean across rounds and its t-interval (finite values)."""
    fin = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    r = stats.ratio_ci(fin, confidence)
    return {"estimate": r.estimate, "lo": r.lo, "hi": r.hi, "n": r.n,
            "failed_rounds": len(values) - len(fin)}


def summarize_load(doc: Mapping[str, Any], plan: Mapping[str, Any],
                   stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    ladder, control, twin = plan["ladder_order"], plan.get("control"), plan.get("twin")
    names = [n for n in list(ladder) + ([control] if control else [])
             if any(r["rung"] == n for r in doc["levels"])]
    conf = stats_cfg["confidence"]
    table, cells, agent = [], [], []
    for lv in doc["levels_planned"]:
        level = lv["level"]
        for n in names:
            p = pooled(doc, n, level)
            if p is None:
                continue
            row = {**lv, "rung": n, "pooled": p,
                   "per_round": {k: interval(per_round(doc, n, level, k), conf)
                                 for k in ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
                                           "tpot_p99_ms", "itl_p99_ms",
                                           "output_tokens_per_s", "goodput_rps")},
                   "server_metrics": _metrics_peaks(doc, n, level)}
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
    return {"experiment": "load", "threads": doc["threads"], "quant": doc["quant"],
            "spec": doc["spec"], "slots": doc["slots"], "cpus": doc.get("cpus"),
            "client_cpus": doc.get("client_cpus"), "rounds": doc["rounds"],
            "table": table, "cells": cells, "agent": agent, "cache_lever": _cache_lever(
                doc, names, stats_cfg) if any(lv["kind"] == "agent"
                                              for lv in doc["levels_planned"]) else [],
            "rung_status": doc["rungs"], "method": doc["method"],
            "definitions": DEFINITIONS}


DEFINITIONS = ("TTFT: request sent to first streamed token; TPOT: (end to end - TTFT) / (output "
               "tokens - 1); ITL: every gap between streamed tokens; E2EL: sent to last chunk "
               "(vLLM's definitions, client clock). Throughput and goodput over the level's "
               "duration; goodput counts requests that completed within every configured limit. "
               "A failed or timed-out request counts as infinitely slow in the percentiles and "
               "never as good.")


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
                    f"{stats.fmt_ratio(ratio)} {word} than `{comp['base']}`'s (as a rate: "
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
