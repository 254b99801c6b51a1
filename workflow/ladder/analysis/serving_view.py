"""The report's serving section: every serving experiment's results summarized and judged with
``ladder.analysis.stats`` (analysis only: it reads the kept results, never runs anything)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from ladder.core import paths
from ladder.analysis import stats, wording
from ladder.planning import protocol
from ladder.core.errors import LadderError
from ladder.planning.serving_experiments import BENCH_EXPERIMENTS, EXPERIMENTS
from ladder.core.io import read_json
from ladder.analysis import depth_view, load_view
from ladder.analysis.context import SectionContext


# --- the report's serving section ----------------------------------------------------------------
def summarize_bench_point(doc: Mapping[str, Any], point: Mapping[str, Any],
                          plan: Mapping[str, Any], stats_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One point's cell. A point on one rung (the toggle, a lever) is judged by its own ladder
    against its own floor (its base setting measured twice); the others compare the rungs."""
    ladder, control, twin = plan["ladder_order"], plan.get("control"), plan.get("twin")
    if point.get("ladder"):
        ladder, control, twin = list(point["ladder"]), point["control"], point["twin"]
    cell = stats.summarize(doc, ladder, control, twin, stats_cfg)
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
        values = ", ".join(f"{wording.fmt_ratio(c['ratio']['estimate'])} at {x}" for x, c in seen)
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
    ladder_cell = stats.summarize(cold, plan["ladder_order"], plan.get("control"), plan.get("twin"),
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
        return (f"{wording.fmt_ratio(r['estimate'])} ({conf}% CI {wording.fmt_ratio(r['lo'])}-"
                f"{wording.fmt_ratio(r['hi'])})")

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
        cell = stats.summarize(sub, plan["ladder_order"], plan.get("control"), plan.get("twin"),
                          stats_cfg)
        latency = {}
        for name in cell["rungs"]:
            ts = sorted(s["t_s"] for s in sub["samples"] if s["rung"] == name)
            if ts:
                latency[name] = ts[len(ts) // 2]
        points.append({"parallel": p, "cell": cell, "latency_s": latency})
    return {"experiment": "concurrency", "threads": doc["threads"], "points": points,
            "rung_status": doc["rungs"], "method": doc["method"], "spec": doc["spec"]}


@dataclass(frozen=True)
class ServerView:
    """How the report reads a serving experiment that runs its own tool
    (``serving_experiments.server_experiments``): its value under its key (``summarize``: the
    measured records, the plan, the stats settings, and the host's price where ``priced``), the
    cells of it that are judged in the serving family's multiplicity step, and what is said of
    it after that step (``finish``, in place)."""
    summarize: Callable[..., dict[str, Any]]
    judged: Callable[[Mapping[str, Any]], list[dict[str, Any]]]
    finish: Callable[[dict[str, Any]], None] | None = None
    priced: bool = False


VIEWS: dict[str, ServerView] = {
    "prefix_cache": ServerView(summarize_prefix, lambda v: [v["cell"]]),
    "depth": ServerView(depth_view.summarize_depth, depth_view.judged, depth_view.finish),
    "concurrency": ServerView(summarize_concurrency, lambda v: [p["cell"] for p in v["points"]]),
    "load": ServerView(load_view.summarize_load, load_view.judged,
                       load_view.finish, priced=True),
}


def serving_section(*, plan: Mapping[str, Any], stats_cfg: Mapping[str, Any],
                    points: Sequence[Mapping[str, Any]], point_files: Sequence[str],
                    missing: list[dict[str, str]],
                    server_files: Mapping[str, Sequence[str]] | None = None,
                    price: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The section's value: the llama-bench points by experiment, and each experiment that runs
    its own tool under its key (``server_files``: its result files, by experiment)."""
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
    judged = [p["cell"] for e in BENCH_EXPERIMENTS for p in out[e]]
    for name, files in (server_files or {}).items():
        if name not in VIEWS:
            raise LadderError(f"serving experiment {name!r}: no view in serving_view.VIEWS "
                              f"(those known: {', '.join(VIEWS)})")
        view = VIEWS[name]
        for path in files:
            try:
                # a disturbed attempt was measured again: only its re-measure is read
                doc = protocol.measured_records(read_json(path))
                out[name] = (view.summarize(doc, plan, stats_cfg, price=price) if view.priced
                             else view.summarize(doc, plan, stats_cfg))
            except LadderError as exc:
                missing.append({"file": path, "problem": str(exc)})
        if out.get(name):
            judged += view.judged(out[name])
    # the serving experiments' comparisons: their own Benjamini-Hochberg families (those with
    # the floor, those above it), apart from the ladder's
    out["multiplicity"] = stats.fdr_adjust(judged, stats_cfg["confidence"],
                                           floor=(plan.get("ladder_order") or [None])[0])
    for name in server_files or {}:  # what is said after the adjustment reads its verdicts
        finish = VIEWS[name].finish
        if out.get(name) and finish:
            finish(out[name])
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
    for exp in VIEWS:
        if section.get(exp):
            note(section[exp].get("rung_status") or {}, exp)
    return sorted(found.values(), key=lambda e: (e["rung"], e["status"]))


def section(ctx: SectionContext) -> dict[str, Any] | None:
    """The registered builder (``ladder.reporting.sections``): None when no serving experiment ran."""
    f = ctx.files
    if not any(f.values()):
        return None
    return serving_section(plan=ctx.plan, stats_cfg=ctx.stats_cfg, missing=ctx.missing,
                           points=ctx.plan.get("serving_points") or [],
                           point_files=f["serving_points"],
                           server_files={k.removeprefix("serving_"): v for k, v in f.items()
                                         if k != "serving_points"},
                           price=ctx.price)
