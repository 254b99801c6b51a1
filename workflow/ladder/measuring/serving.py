"""The serving experiments that run llama-server or llama-batched-bench, measured like the
ladder: every rung interleaved in shuffled rounds, every raw output kept. The report's view of
them is ``ladder.servingview``; their definitions and points, ``ladder.experiments``.

* ``prefix_cache``: llama-server, cold TTFT (cache_prompt false) vs warm TTFT on a shared prefix,
  from the server's own timings;
* ``concurrency``: llama-batched-bench throughput and per-request latency vs parallel sequences
  (the offline view: one batch, no request waits in a queue).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder.core import progress
from ladder.measuring.bench import built_rungs, round_orders
from ladder.core.errors import LadderError
from ladder.core.machine import host_brief
from ladder.planning.protocol import run_seed
from ladder.core.io import atomic_write_json, atomic_write_text, read_json
from ladder.core.run import run
from ladder.measuring.server import PortTaken, llama_server

FORMAT = "ladder-serving/1"


# --- server and batched-bench experiments --------------------------------------------------------
def prefix_words(corpus: str, n: int) -> str:
    words = Path(corpus).read_text(errors="replace").split()
    if len(words) < n + 40:
        raise LadderError(f"serving.prefix_cache.prefix_words: {n} words asked for, but the "
                          f"corpus {corpus} has {len(words)}")
    return " ".join(words[:n])


SUFFIXES = ("\n\nQuestion: who may copy this text?\nAnswer:",
            "\n\nQuestion: what does the license protect?\nAnswer:",
            "\n\nQuestion: summarise the first paragraph.\nAnswer:")


def prefix_cache(*, rungs: Sequence[Mapping[str, Any]], model_meta: str, corpus: str,
                 settings: Mapping[str, Any], threads: int, rounds: int, seed: int | None,
                 timeout_s: float, raw_dir: str, out_json: str,
                 port: int | None = None) -> dict[str, Any]:
    """Per round and rung: a fresh server, then cold, priming and warm requests on one prefix."""
    model = read_json(model_meta)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    cfg = settings["prefix_cache"]
    prefix = prefix_words(corpus, cfg["prefix_words"])
    active, status, bins = built_rungs(rungs, "serving")
    by_name = {r["name"]: r for r in rungs}
    samples: list[dict[str, Any]] = []
    seed, seed_source = run_seed(seed)
    orders = round_orders(active, rounds, seed, f"prefix_cache/{model['quant']}/t{threads}")
    brief = host_brief()
    for rnd, order in enumerate(orders):
        for pos, name in enumerate(order):
            if status[name]["status"] != "measured":
                continue
            r = by_name[name]
            log = str(raw / f"round{rnd:02d}-{pos:02d}-{name}.server.log")
            try:
                with llama_server(bins[name], model["path"], threads=threads, ctx=cfg["ctx"],
                                  log=log, port=port, env=r["env"],
                                  args=[*r["common_argv"], *cfg.get("server_args", [])],
                                  ready_timeout_s=cfg["ready_timeout_s"]) as srv:
                    srv.post("/completion", {"prompt": "Hello", "n_predict": 1,
                                             "cache_prompt": False}, timeout_s)  # loads everything
                    out = {}
                    for kind, suffix, cache in (("cold", SUFFIXES[0], False),
                                                ("prime", SUFFIXES[1], True),
                                                ("warm", SUFFIXES[2], True)):
                        reply, wall_ms = srv.post("/completion", {
                            "prompt": prefix + suffix, "n_predict": 1, "cache_prompt": cache,
                            "temperature": 0, "seed": seed}, timeout_s)
                        out[kind] = {"wall_ms": round(wall_ms, 3), "timings": reply.get("timings"),
                                     "tokens_cached": reply.get("tokens_cached")}
            except PortTaken:
                raise  # the machine's fault, not the rung's: the rule fails, naming the port
            except LadderError as exc:
                status[name].update(status="failed", reason=str(exc), round=rnd, raw=log)
                progress.step("round", rnd + 1, len(orders), name, f"failed: {exc}")
                continue
            progress.step("round", rnd + 1, len(orders), name,
                          *(f"{k} {float((out[k]['timings'] or {}).get('prompt_ms') or 0):.0f} "
                            "ms prefill" for k in ("cold", "warm")))
            atomic_write_text(raw / f"round{rnd:02d}-{pos:02d}-{name}.json",
                              json.dumps(out, indent=1))
            for kind in ("cold", "warm"):
                t = out[kind]["timings"] or {}
                prompt_ms = float(t.get("prompt_ms") or 0.0)
                first_ms = prompt_ms + float(t.get("predicted_ms") or 0.0)
                samples.append({
                    "rung": name if kind == "cold" else f"{name}+cache", "base_rung": name,
                    "kind": kind, "round": rnd, "order": pos, "warmup": False,
                    "build_key": status[name]["build_key"],
                    "ttft_ms": first_ms, "wall_ms": out[kind]["wall_ms"],
                    "prompt_ms": prompt_ms, "prompt_n": t.get("prompt_n"),
                    "cache_n": t.get("cache_n"), "n_threads": threads,
                    # a rate, so "faster" reads the same way as throughput: first tokens per s
                    "tokens_per_s": 1000.0 / first_ms if first_ms > 0 else 0.0,
                    **brief,
                })
    if not samples:
        raise LadderError("serving prefix_cache: no rung's llama-server produced a measurement: "
                          + "; ".join(f"{n}: {st['reason']}" for n, st in status.items()))
    doc = {"format": FORMAT, "experiment": "prefix_cache", "quant": model["quant"].lower(),
           "workload": "prefix_cache", "threads": threads, "rounds": rounds, "seed": seed,
           "seed_source": seed_source,
           "orders": orders, "prefix_words": cfg["prefix_words"], "ctx": cfg["ctx"],
           "server_args": list(cfg.get("server_args", [])),
           "host": brief, "rungs": status, "samples": samples,
           "method": "llama-server on 127.0.0.1, one fresh server per round and rung; TTFT = "
                     "prompt_ms + predicted_ms (n_predict 1) from the server's timings; cold "
                     "with cache_prompt false, warm after a priming request on the same prefix"}
    atomic_write_json(out_json, doc)
    return doc


def batched_records(text: str, source: str) -> list[dict[str, Any]]:
    """llama-batched-bench --output-format jsonl: one JSON object per line (others skipped)."""
    recs = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise LadderError(f"{source}: unreadable jsonl line: {line[:120]}") from exc
            if "pl" in rec and "speed" in rec:
                recs.append(rec)
    if not recs:
        raise LadderError(f"{source}: no llama-batched-bench jsonl records")
    return recs


def concurrency(*, rungs: Sequence[Mapping[str, Any]], model_meta: str,
                settings: Mapping[str, Any], threads: int, rounds: int, seed: int | None,
                timeout_s: float, raw_dir: str, out_json: str) -> dict[str, Any]:
    model = read_json(model_meta)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    cfg = settings["concurrency"]
    active, status, bins = built_rungs(rungs, "serving")
    by_name = {r["name"]: r for r in rungs}
    seed, seed_source = run_seed(seed)
    orders = round_orders(active, rounds, seed, f"concurrency/{model['quant']}/t{threads}")
    brief = host_brief()
    samples: list[dict[str, Any]] = []
    npl = ",".join(str(p) for p in cfg["parallel"])
    ctx = max(cfg["parallel"]) * (cfg["n_prompt"] + cfg["n_gen"]) + 16
    for rnd, order in enumerate(orders):
        for pos, name in enumerate(order):
            if status[name]["status"] != "measured":
                continue
            r = by_name[name]
            argv = [str(Path(bins[name]) / "llama-batched-bench"), "-m", model["path"],
                    "-c", str(ctx), "-npp", str(cfg["n_prompt"]), "-ntg", str(cfg["n_gen"]),
                    "-npl", npl, "-t", str(threads), "--output-format", "jsonl",
                    *(a for a in r["common_argv"])]
            res = run(argv, env=r["env"], timeout_s=timeout_s)
            stem = raw / f"round{rnd:02d}-{pos:02d}-{name}"
            atomic_write_text(f"{stem}.jsonl", res.stdout)
            atomic_write_text(f"{stem}.stderr.log", f"$ {' '.join(argv)}\n{res.stderr}")
            failure = res.failure()
            if failure:
                status[name].update(status="crashed" if res.signal_name else "failed",
                                    reason=failure, round=rnd, raw=f"{stem}.stderr.log")
                progress.step("round", rnd + 1, len(orders), name, failure.splitlines()[0])
                continue
            progress.step("round", rnd + 1, len(orders), name, f"{res.wall_s:.1f} s")
            for rec in batched_records(res.stdout, f"{stem}.jsonl"):
                samples.append({
                    "rung": name, "round": rnd, "order": pos, "warmup": False,
                    "build_key": status[name]["build_key"], "parallel": int(rec["pl"]),
                    "tokens_per_s": float(rec["speed"]), "speed_pp": float(rec["speed_pp"]),
                    "speed_tg": float(rec["speed_tg"]), "t_s": float(rec["t"]),
                    "n_threads": threads, "peak_rss_kib": res.peak_rss_kib, **brief,
                })
    doc = {"format": FORMAT, "experiment": "concurrency", "quant": model["quant"].lower(),
           "workload": "concurrency", "threads": threads, "rounds": rounds, "seed": seed,
           "seed_source": seed_source,
           "orders": orders, "spec": dict(cfg), "host": brief, "rungs": status,
           "samples": samples,
           "method": "llama-batched-bench -npp/-ntg per sequence, -npl parallel sequences; "
                     "throughput = all tokens / batch time; per-request latency = batch time"}
    atomic_write_json(out_json, doc)
    return doc
