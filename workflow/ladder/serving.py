"""The serving-side levers, measured like the ladder: every rung interleaved in shuffled rounds,
the control rung's noise floor, and the same verdicts.

* llama-bench points (one job per point): ``context`` (prefill at growing prompt lengths, decode
  at growing depth), ``kv_cache`` (cache types, flash attention on), ``ubatch`` (-ub sizes) and
  ``toggle`` (one binary with its mechanism on vs off, per thread count);
* ``prefix_cache``: llama-server, cold TTFT (cache_prompt false) vs warm TTFT on a shared prefix,
  from the server's own timings;
* ``concurrency``: llama-batched-bench throughput and per-request latency vs parallel sequences.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from ladder import progress, stats
from ladder.bench import built_rungs, round_orders
from ladder import paths
from ladder.errors import LadderError
from ladder.machine import host_brief
from ladder.io import atomic_write_json, atomic_write_text, read_json
from ladder.run import run
from ladder.server import PortTaken, llama_server
from ladder.serveload import sentences as load_sentences
from ladder.serveload import summarize_load

FORMAT = "ladder-serving/1"
# The llama-bench experiments, each described once: its report title and its figures' x axis
# per phase (the rules, the report, the templates and the figures read this table).
EXPERIMENTS: dict[str, dict[str, Any]] = {
    "context": {"title": "Context length: prefill at growing prompts, decode at depth",
                "axes": {"prefill": "prompt tokens", "decode": "context depth (tokens)"}},
    "kv_cache": {"title": "KV-cache type (flash attention on), on each rung against its first type",
                 "axes": {"prefill": "KV cache type (flash attention on)",
                          "decode": "KV cache type (flash attention on)"},
                 "lever": True},
    "ubatch": {"title": "Micro-batch size (-ub), on each rung against the default",
               "axes": {"prefill": "micro-batch (-ub)"}, "lever": True},
    "toggle": {"title": "Vendor/repack toggle across thread counts",
               "axes": {"prefill": "threads", "decode": "threads"}},
}
BENCH_EXPERIMENTS = tuple(EXPERIMENTS)
# a lever is judged on one rung at a time: its settings against its baseline setting
LEVERS = tuple(e for e, spec in EXPERIMENTS.items() if spec.get("lever"))


# --- the points of the llama-bench experiments ---------------------------------------------------
def bench_points(cfg: Mapping[str, Any], threads_all: int) -> list[dict[str, Any]]:
    """Every llama-bench point: experiment, point name, workload spec, thread count."""
    pts: list[dict[str, Any]] = []

    def add(exp: str, name: str, spec: dict[str, Any], threads: int, x: Any, **extra: Any) -> None:
        pts.append({"experiment": exp, "point": name, "spec": spec, "threads": threads,
                    "x": x, **extra})

    c = cfg.get("context") or {}
    if c.get("enabled"):
        for p in c["prompts"]:
            add("context", f"pp{p}", {"n_prompt": p, "n_gen": 0}, threads_all, p, phase="prefill")
        for d in c["depths"]:
            add("context", f"tg{c['n_gen']}_d{d}", {"n_prompt": 0, "n_gen": c["n_gen"],
                                                     "n_depth": d}, threads_all, d, phase="decode")
    # levers: one point per workload, expanded per lever rung by the plan (Plan.serving_points):
    # the lever's settings are interleaved inside one job on that rung and judged against the
    # lever's baseline setting, whose second label gives the point its own noise floor
    k = cfg.get("kv_cache") or {}
    if k.get("enabled"):
        settings = {t: ["-ctk", t, "-ctv", t, "-fa", "1"] for t in k["types"]}
        add("kv_cache", f"pp{k['n_prompt']}", {"n_prompt": k["n_prompt"], "n_gen": 0},
            threads_all, f"pp{k['n_prompt']}", phase="prefill",
            lever={"baseline": k["types"][0], "settings": settings})
        if k["n_gen"]:
            add("kv_cache", f"tg{k['n_gen']}_d{k['depth']}",
                {"n_prompt": 0, "n_gen": k["n_gen"], "n_depth": k["depth"]}, threads_all,
                f"tg{k['n_gen']}_d{k['depth']}", phase="decode",
                lever={"baseline": k["types"][0], "settings": settings})
    u = cfg.get("ubatch") or {}
    if u.get("enabled"):
        settings = {"ub_default": [], **{f"ub{n}": ["-ub", str(n)] for n in u["sizes"]}}
        add("ubatch", f"pp{u['n_prompt']}", {"n_prompt": u["n_prompt"], "n_gen": 0},
            threads_all, f"pp{u['n_prompt']}", phase="prefill",
            lever={"baseline": "ub_default", "settings": settings})
    t = cfg.get("toggle") or {}
    if t.get("enabled"):
        spec = {"n_prompt": t["n_prompt"], "n_gen": t["n_gen"]}
        if bool(spec["n_prompt"]) == bool(spec["n_gen"]):
            raise LadderError("serving.toggle: give n_prompt or n_gen (one phase), not both")
        name = f"pp{spec['n_prompt']}" if spec["n_prompt"] else f"tg{spec['n_gen']}"
        seen = []
        for th in t["threads"]:
            n = threads_all if th == "all" else int(th)
            if n not in seen:
                seen.append(n)
                add("toggle", name, spec, n, n,
                    phase="prefill" if spec["n_prompt"] else "decode")
    return pts


def toggle_variant(cfg: Mapping[str, Any], arch: str) -> dict[str, Any] | None:
    return ((cfg.get("toggle") or {}).get("variants") or {}).get(arch)


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
                 settings: Mapping[str, Any], threads: int, rounds: int, seed: int,
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
                settings: Mapping[str, Any], threads: int, rounds: int, seed: int,
                timeout_s: float, raw_dir: str, out_json: str) -> dict[str, Any]:
    model = read_json(model_meta)
    raw = Path(raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    cfg = settings["concurrency"]
    active, status, bins = built_rungs(rungs, "serving")
    by_name = {r["name"]: r for r in rungs}
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
           "orders": orders, "spec": dict(cfg), "host": brief, "rungs": status,
           "samples": samples,
           "method": "llama-batched-bench -npp/-ntg per sequence, -npl parallel sequences; "
                     "throughput = all tokens / batch time; per-request latency = batch time"}
    atomic_write_json(out_json, doc)
    return doc


# --- the report's serving section ----------------------------------------------------------------
def _summarize(doc: Mapping[str, Any], ladder: Sequence[str], control: str | None,
               twin: str | None, stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    return stats.summarize_cell(doc, ladder, control, twin,
                                confidence=stats_cfg["confidence"],
                                resamples=stats_cfg["bootstrap_resamples"], seed=stats_cfg["seed"],
                                thresholds=stats_cfg.get("threshold"))


def summarize_bench_point(doc: Mapping[str, Any], point: Mapping[str, Any],
                          plan: Mapping[str, Any], stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One point's cell. A point on one rung (the toggle, a lever) is judged by its own ladder
    against its own floor (its base setting measured twice); the others compare the rungs."""
    ladder, control, twin = plan["ladder_order"], plan.get("control"), plan.get("twin")
    if point.get("ladder"):
        ladder, control, twin = list(point["ladder"]), point["control"], point["twin"]
    cell = _summarize(doc, ladder, control, twin, stats_cfg)
    out = {**{k: point[k] for k in ("experiment", "point", "x", "phase", "spec")},
           "threads": doc["threads"], "cell": cell, "rung_status": doc["rungs"]}
    if point.get("lever"):
        out.update(base=point["base"], baseline=point["twin"], workload=point["workload"],
                   memory=lever_memory(cell, ladder))
    return out


def lever_memory(cell: Mapping[str, Any], settings: Sequence[str]) -> list[dict[str, Any]]:
    """Peak RSS of each lever setting's processes (rusage), and its difference from the
    baseline's: what a KV-cache type or micro-batch saves, measured, not computed."""
    rss = {n: (cell["rungs"].get(n) or {}).get("peak_rss_kib") for n in settings}
    base = rss.get(settings[0]) if settings else None
    return [{"setting": n, "peak_rss_mib": round(v / 1024, 1) if v else None,
             "vs_baseline_mib": round((v - base) / 1024, 1) if v and base else None}
            for n, v in rss.items()]


def advantage_along(points: Sequence[Mapping[str, Any]], axis: str) -> list[str]:
    """Along the context sweep's prompt lengths (or depths): each step's ratio at every point,
    and whether its advantage shrinks, grows or inverts. A trend is stated only where the
    intervals at the two ends do not overlap, an inversion only where both ends are called."""
    pts = sorted(points, key=lambda p: p["x"])
    pairs = list(dict.fromkeys((c["base"], c["rung"]) for p in pts for c in p["cell"]["steps"]))
    out = []
    for base, rung in pairs:
        seen = [(p["x"], c) for p in pts for c in p["cell"]["steps"]
                if (c["base"], c["rung"]) == (base, rung) and c["ratio"]["estimate"]]
        if len(seen) < 2:
            continue
        (x0, first), (x1, last) = seen[0], seen[-1]
        f, l_ = first["ratio"], last["ratio"]
        values = ", ".join(f"{stats.fmt_ratio(c['ratio']['estimate'])} at {x}" for x, c in seen)
        calls = {first["verdict"]["call"], last["verdict"]["call"]}
        if calls == {"faster", "slower"}:
            trend = f"inverts between {x0} and {x1} {axis}"
        elif None in (f["lo"], f["hi"], l_["lo"], l_["hi"]):
            trend = "no trend shown (too few rounds for intervals)"
        elif l_["hi"] < f["lo"]:
            trend = f"shrinks from {x0} to {x1} {axis} (the intervals do not overlap)"
        elif l_["lo"] > f["hi"]:
            trend = f"grows from {x0} to {x1} {axis} (the intervals do not overlap)"
        else:
            trend = (f"no change this run can show from {x0} to {x1} {axis} "
                     "(the intervals overlap)")
        out.append(f"`{rung}` over `{base}`: {values}; {trend}.")
    return out


def summarize_prefix(doc: Mapping[str, Any], plan: Mapping[str, Any],
                     stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Kernel ladder on cold TTFT; prefix cache = warm vs cold on each rung, same floor."""
    cold = {**doc, "samples": [s for s in doc["samples"] if s["kind"] == "cold"]}
    ladder_cell = _summarize(cold, plan["ladder_order"], plan.get("control"), plan.get("twin"),
                             stats_cfg)
    nf = ladder_cell["noise_floor"]
    cache = []
    for name in plan["ladder_order"] + ([plan["control"]] if plan.get("control") else []):
        ratios = stats.paired_ratios(doc["samples"], name, f"{name}+cache")
        r = stats.ratio_ci(ratios, stats_cfg["confidence"])
        warm = [s for s in doc["samples"] if s["rung"] == f"{name}+cache"]
        coldr = [s for s in doc["samples"] if s["rung"] == name]
        if not warm:
            continue
        share = [s["cache_n"] / (s["cache_n"] + s["prompt_n"]) for s in warm
                 if s.get("cache_n") is not None and s.get("prompt_n") is not None
                 and (s["cache_n"] + s["prompt_n"]) > 0]
        cache.append({
            "rung": name, "ratio": asdict(r), "verdict": asdict(stats.verdict(
                r, nf["threshold"], bias=nf["control_check"]["bias"])),
            "ttft_cold_ms": stats.rung_summary([{**s, "tokens_per_s": s["ttft_ms"]}
                                                for s in coldr], name, stats_cfg["confidence"],
                                               stats_cfg["bootstrap_resamples"],
                                               stats_cfg["seed"]),
            "ttft_warm_ms": stats.rung_summary([{**s, "tokens_per_s": s["ttft_ms"]}
                                                for s in warm], f"{name}+cache",
                                               stats_cfg["confidence"],
                                               stats_cfg["bootstrap_resamples"],
                                               stats_cfg["seed"]),
            "prefill_skipped": (sum(share) / len(share)) if share else None,
            "cache_n": sorted({s.get("cache_n") for s in warm}, key=lambda x: x or 0),
            "prompt_n_cold": sorted({s.get("prompt_n") for s in coldr}, key=lambda x: x or 0),
        })
    # both levers on one base rung: the build people run (the control's twin), else the top rung
    # measured; the kernel lever is that rung against the floor (cold), the cache lever is warm
    # against cold on that same rung
    base = plan.get("twin") if any(s["rung"] == plan.get("twin")
                                   for s in ladder_cell["vs_floor"]) else None
    if base is None and ladder_cell["vs_floor"]:
        base = ladder_cell["vs_floor"][-1]["rung"]
    kernel = next((s for s in ladder_cell["vs_floor"] if s["rung"] == base), None)
    cached = next((c for c in cache if c["rung"] == base), None)
    return {"experiment": "prefix_cache", "threads": doc["threads"], "cell": ladder_cell,
            "cache": cache, "rung_status": doc["rungs"], "method": doc["method"],
            "prefix_words": doc["prefix_words"], "server_args": doc.get("server_args", []),
            "levers": lever_sentence(kernel, cached)}


def lever_sentence(kernel: Mapping[str, Any] | None,
                   cache: Mapping[str, Any] | None) -> str:
    """Which lever bought more TTFT on one base rung: the kernel ladder (that rung against the
    floor, cold) or the prefix cache (warm against cold on that rung). Bigger only when the two
    intervals do not overlap; otherwise it cannot tell."""
    if not kernel or not cache:
        return "not both levers measured on one rung"
    k, c = kernel["ratio"], cache["ratio"]
    if None in (k["estimate"], k["lo"], k["hi"], c["estimate"], c["lo"], c["hi"]):
        return "not both levers measured on one rung with an interval"
    conf = int(k["confidence"] * 100)

    def one(r: Mapping[str, Any]) -> str:
        return (f"{stats.fmt_ratio(r['estimate'])} ({conf}% CI {stats.fmt_ratio(r['lo'])}-"
                f"{stats.fmt_ratio(r['hi'])})")

    head = (f"TTFT on `{kernel['rung']}`: kernel ladder (vs `{kernel['base']}`, cold) "
            f"{one(k)}; prefix cache (warm vs cold) {one(c)}.")
    if c["lo"] > k["hi"]:
        return f"{head} The prefix cache is the bigger lever on this rung."
    if k["lo"] > c["hi"]:
        return f"{head} The kernel ladder is the bigger lever on this rung."
    return f"{head} The intervals overlap: cannot tell which lever is bigger."


def summarize_concurrency(doc: Mapping[str, Any], plan: Mapping[str, Any],
                          stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    points = []
    for p in sorted({s["parallel"] for s in doc["samples"]}):
        sub = {**doc, "workload": f"parallel{p}",
               "samples": [s for s in doc["samples"] if s["parallel"] == p]}
        cell = _summarize(sub, plan["ladder_order"], plan.get("control"), plan.get("twin"),
                          stats_cfg)
        latency = {}
        for name in cell["rungs"]:
            ts = sorted(s["t_s"] for s in sub["samples"] if s["rung"] == name)
            if ts:
                latency[name] = ts[len(ts) // 2]
        points.append({"parallel": p, "cell": cell, "latency_s": latency})
    return {"experiment": "concurrency", "threads": doc["threads"], "points": points,
            "rung_status": doc["rungs"], "method": doc["method"], "spec": doc["spec"]}


def serving_section(*, plan: Mapping[str, Any], stats_cfg: Mapping[str, Any],
                    points: Sequence[Mapping[str, Any]], point_files: Sequence[str],
                    prefix: Sequence[str], concurrency_files: Sequence[str],
                    missing: list[dict[str, str]],
                    load_files: Sequence[str] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {e: [] for e in BENCH_EXPERIMENTS}
    out["titles"] = {e: EXPERIMENTS[e]["title"] for e in BENCH_EXPERIMENTS}
    by_key = {(p["experiment"], p["point"], int(p["threads"])): p for p in points}
    for path in point_files:
        try:
            doc = read_json(path)
        except LadderError as exc:
            missing.append({"file": path, "problem": str(exc)})
            continue
        # a point's identity is in its own JSON (older results: read back from its path)
        where = paths.match("serving_point", path) or {}
        key = (doc.get("experiment") or where.get("experiment"), doc.get("workload"),
               int(doc.get("threads") or where.get("threads") or 0))
        point = by_key.get(key)
        if point is None:
            missing.append({"file": path, "problem": f"not a point of this plan ({key})"})
            continue
        try:
            out[point["experiment"]].append(summarize_bench_point(doc, point, plan, stats_cfg))
        except LadderError as exc:
            missing.append({"file": path, "problem": str(exc)})
    for path in prefix:
        try:
            out["prefix_cache"] = summarize_prefix(read_json(path), plan, stats_cfg)
        except LadderError as exc:
            missing.append({"file": path, "problem": str(exc)})
    for path in concurrency_files:
        try:
            out["concurrency"] = summarize_concurrency(read_json(path), plan, stats_cfg)
        except LadderError as exc:
            missing.append({"file": path, "problem": str(exc)})
    for path in load_files:
        try:
            out["load"] = summarize_load(read_json(path), plan, stats_cfg)
        except LadderError as exc:
            missing.append({"file": path, "problem": str(exc)})
    # one Benjamini-Hochberg family for the serving experiments' comparisons
    out["multiplicity"] = stats.fdr_adjust(
        [p["cell"] for e in BENCH_EXPERIMENTS for p in out[e]]
        + ([out["prefix_cache"]["cell"]] if out.get("prefix_cache") else [])
        + ([c["cell"] for c in out["load"]["cells"]] if out.get("load") else []),
        stats_cfg["confidence"])
    if out.get("load"):  # its sentences read the verdicts after the run's adjustment
        out["load"]["sentences"] = load_sentences(out["load"])
    out["context_trend"] = {
        phase: advantage_along([p for p in out["context"] if p.get("phase") == phase],
                               EXPERIMENTS["context"]["axes"][phase])
        for phase in ("prefill", "decode")}
    out["unmeasured"] = unmeasured_rungs(out)
    return out


def unmeasured_rungs(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every rung that a serving experiment did not measure somewhere, with its status, the
    points where it was not measured, its reason and a log: a table's "-" is never unexplained."""
    found: dict[tuple[str, str], dict[str, Any]] = {}

    def note(status_map: Mapping[str, Any], where: str) -> None:
        for name, st in (status_map or {}).items():
            if st.get("status") in (None, "measured"):
                continue
            e = found.setdefault((name, st["status"]), {
                "rung": name, "status": st["status"],
                "reason": str(st.get("reason") or "").splitlines()[0] if st.get("reason") else None,
                "log": st.get("raw") or st.get("log"), "points": []})
            e["points"].append(where)

    for exp in BENCH_EXPERIMENTS:
        for p in section.get(exp) or []:
            status = p.get("rung_status") or {}
            if p.get("baseline"):  # a lever's settings are labels of one rung: name the rung
                first = next((st for st in status.values()
                              if st.get("status") not in (None, "measured")), None)
                status = {p["base"]: first} if first else {}
            note(status, f"{exp} {p['point']} t{p['threads']}")
    for exp in ("prefix_cache", "concurrency", "load"):
        if section.get(exp):
            note(section[exp].get("rung_status") or {}, exp)
    return sorted(found.values(), key=lambda e: (e["rung"], e["status"]))

