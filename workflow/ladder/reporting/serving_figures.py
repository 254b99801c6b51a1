"""The serving section's figures (registered in ``sections.SECTIONS``): each serving experiment's
curves and lever charts, and serving under load's latency curves and capacity attainment
curves, drawn from the report JSON alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ladder.planning.serving_experiments import EXPERIMENTS, LEVERS
from ladder.reporting.plotting import COLORS, plt
from ladder.reporting.plotting import order as _order
from ladder.reporting.plotting import save as _save


def _rung_lines(points: list[Mapping[str, Any]], names: list[str], key: str = "median"
                ) -> dict[str, list[float | None]]:
    return {n: [(p["cell"]["rungs"].get(n) or {}).get(key) for p in points] for n in names}


def serving_curve(doc: Mapping[str, Any], points: list[Mapping[str, Any]], fid: str, title: str,
                  xlabel: str, caption: str, out_dir: Path, rss: bool = False) -> dict[str, Any]:
    """tokens/s per rung against the experiment's x (numbers on a log axis, else categories)."""
    if len(points) < 2:
        return {"id": fid, "title": title, "file": None,
                "why_not": f"{len(points)} point(s); a curve needs two"}
    names = [n for n in _order(doc) + sorted({k for p in points for k in p["cell"]["rungs"]})
             if any((p["cell"]["rungs"].get(n) or {}).get("median") for p in points)]
    names = list(dict.fromkeys(names))
    xs = [p["x"] for p in points]
    numeric = all(isinstance(x, (int, float)) for x in xs)
    pos = xs if numeric else list(range(len(xs)))
    fig, axes = plt.subplots(1, 2 if rss else 1, figsize=(10.5 if rss else 6.4, 3.3),
                             squeeze=False)
    ax = axes[0][0]
    for i, (n, ys) in enumerate(_rung_lines(points, names).items()):
        ax.plot(pos, [y if y else float("nan") for y in ys], marker="o", label=n,
                color="#999999" if n == doc.get("control") else COLORS[i % len(COLORS)],
                linestyle="--" if n == doc.get("control") else "-")
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s (median)")
    ax.set_xlabel(xlabel)
    if numeric and max(xs) > 0 and min(xs) > 0 and max(xs) / min(xs) >= 4:
        ax.set_xscale("log", base=2)
    if not numeric:
        ax.set_xticks(pos, [str(x) for x in xs])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(title, fontsize=10)
    if rss:
        ax2 = axes[0][1]
        for i, (n, ys) in enumerate(_rung_lines(points, names, "peak_rss_kib").items()):
            ax2.plot(pos, [y / 1024 if y else float("nan") for y in ys], marker=".", label=n,
                     color="#999999" if n == doc.get("control") else COLORS[i % len(COLORS)])
        ax2.set_ylabel("peak RSS (MiB)")
        ax2.set_xlabel(xlabel)
        if numeric and min(xs) > 0 and max(xs) / min(xs) >= 4:
            ax2.set_xscale("log", base=2)
        ax2.grid(alpha=0.3)
        ax2.set_title("memory per point", fontsize=10)
        fig.tight_layout()
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid), "caption": caption}


def lever_chart(points: list[Mapping[str, Any]], fid: str, title: str, xlabel: str,
                out_dir: Path) -> dict[str, Any]:
    """A lever on each rung: every setting's ratio to the lever's baseline on that rung, with
    its interval; the shaded band is the threshold δ of the point's phase."""
    settings = list(dict.fromkeys(
        [p["baseline"] for p in points] + [c["rung"] for p in points for c in p["cell"]["vs_floor"]]))
    if len(settings) < 2:
        return {"id": fid, "title": title, "file": None,
                "why_not": "no setting was measured beside the baseline"}
    fig, ax = plt.subplots(figsize=(6.4, 3.3))
    pos = list(range(len(settings)))
    for i, p in enumerate(points):
        by = {c["rung"]: c["ratio"] for c in p["cell"]["vs_floor"]}
        ys, lo, hi = [], [], []
        for n in settings:
            r = ({"estimate": 1.0, "lo": 1.0, "hi": 1.0} if n == p["baseline"]
                 else by.get(n)) or {}
            est = r.get("estimate")
            ys.append(est if est else float("nan"))
            lo.append(est - r["lo"] if est and r.get("lo") else 0.0)
            hi.append(r["hi"] - est if est and r.get("hi") else 0.0)
        off = (i - (len(points) - 1) / 2) * 0.08
        color = COLORS[i % len(COLORS)]
        ax.errorbar([x + off for x in pos], ys, yerr=[lo, hi], marker="o", capsize=3,
                    color=color, label=p["base"])
        band = (p["cell"]["noise_floor"] or {}).get("threshold")
        if band:
            ax.axhspan(1 / (1 + band), 1 + band, color=color, alpha=0.08)
    ax.axhline(1.0, color="#999999", linewidth=0.8)
    ax.set_xticks(pos, settings)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tokens/s vs the baseline")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(title, fontsize=10)
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid),
            "caption": "Each rung's settings against its own baseline (geometric mean of paired "
                       "rounds, with the interval); shaded: ±δ, the threshold under which no "
                       "change is called."}


def serving_figures(doc: Mapping[str, Any], out: Path) -> dict[str, Any]:
    srv = doc.get("serving") or {}
    figs: dict[str, Any] = {}
    axes = [(exp, phase, xlabel) for exp, spec in EXPERIMENTS.items()
            for phase, xlabel in spec["axes"].items()]
    for exp, phase, xlabel in axes:
        pts = [p for p in srv.get(exp) or [] if p.get("phase") == phase]
        if not pts:
            continue
        if exp in LEVERS:
            figs[f"{exp}_{phase}"] = lever_chart(pts, f"serving_{exp}_{phase}",
                                                 f"{exp.replace('_', ' ')}: {phase}", xlabel, out)
            continue
        pts.sort(key=lambda p: (isinstance(p["x"], str), p["x"]))
        figs[f"{exp}_{phase}"] = serving_curve(
            doc, pts, f"serving_{exp}_{phase}", f"{exp.replace('_', ' ')}: {phase}", xlabel,
            "Median of the interleaved rounds per rung; dashed grey = the control."
            + (" Right: peak RSS of each point's processes." if exp == "context" else ""),
            out, rss=exp == "context")
    for key, draw in FIGURES.items():  # each experiment that runs its own tool, if it draws
        if srv.get(key):
            figs.update(draw(doc, srv[key], out))
    return figs


def concurrency_figures(doc: Mapping[str, Any], conc: Mapping[str, Any], out: Path
                        ) -> dict[str, Any]:
    if not conc.get("points"):
        return {}
    pts: list[Mapping[str, Any]] = [{"x": p["parallel"], "cell": p["cell"]}
                                    for p in conc["points"]]
    return {"concurrency": serving_curve(
        doc, pts, "serving_concurrency", "concurrency: total throughput",
        "parallel sequences (llama-batched-bench -npl)",
        "All sequences' tokens per second of batch time, median per rung.", out)}


def prefix_cache_figures(doc: Mapping[str, Any], pc: Mapping[str, Any], out: Path
                         ) -> dict[str, Any]:
    if not pc.get("cache"):
        return {}
    fid = "serving_prefix_cache"
    names = [c["rung"] for c in pc["cache"]]
    cold = [(c["ttft_cold_ms"] or {}).get("median") or 0 for c in pc["cache"]]
    warm = [(c["ttft_warm_ms"] or {}).get("median") or 0 for c in pc["cache"]]
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    xs = list(range(len(names)))
    ax.bar([x - 0.2 for x in xs], cold, width=0.4, label="cold (cache_prompt false)",
           color=COLORS[0])
    ax.bar([x + 0.2 for x in xs], warm, width=0.4, label="warm (shared prefix cached)",
           color=COLORS[2])
    ax.set_xticks(xs, names)
    ax.set_yscale("log")
    ax.set_ylabel("time to first token (ms, median)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("prefix cache: TTFT per rung", fontsize=10)
    return {"prefix_cache": {"id": fid, "title": "prefix cache: TTFT per rung",
                             "file": _save(fig, out, fid),
                             "caption": "llama-server's own prompt+first-token time, median "
                                        "of the interleaved rounds (log scale)."}}


def load_figures(doc: Mapping[str, Any], load: Mapping[str, Any], out: Path) -> dict[str, Any]:
    figs = load_curves(doc, load, out) if load.get("table") else {}
    for key, name in (("capacity", "load_capacity"),
                      ("concurrency_capacity", "load_concurrency_capacity")):
        if load.get(key):
            figs[name] = attainment_curves(doc, load[key], out)
    return figs


def attainment_curves(doc: Mapping[str, Any], cap: Mapping[str, Any], out: Path
                      ) -> dict[str, Any]:
    """SLO attainment against the offered rate (or concurrent streams) per rung (every probe
    pooled per value, Wilson intervals), the target drawn: where each curve crosses it is that
    rung's capacity."""
    streams = cap.get("dimension") == "concurrency"
    x = "concurrency" if streams else "rate"
    fid = "serving_load_concurrency_capacity" if streams else "serving_load_capacity"
    names = [n for n in dict.fromkeys([*_order(doc), *cap["curve"]]) if cap["curve"].get(n)]
    fig, ax = plt.subplots(figsize=(6.8, 3.4))
    for i, n in enumerate(names):
        pts = cap["curve"][n]
        color = "#999999" if n == doc.get("control") else COLORS[i % len(COLORS)]
        xs = [p[x] for p in pts]
        ys = [p["attainment"] * 100 for p in pts]
        err = [[(p["attainment"] - p["ci"][0]) * 100 for p in pts],
               [(p["ci"][1] - p["attainment"]) * 100 for p in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=2, color=color, label=n)
    ax.axhline(cap["target"] * 100, color="#b22222", linewidth=1, linestyle="--",
               label=f"target {cap['target'] * 100:g} %")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent streams (closed loop, log scale)" if streams
                  else "offered request rate (requests/s, log scale)")
    ax.set_ylabel("requests within the limits (%)")
    ax.set_ylim(-5, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    title = f"SLO attainment against {'concurrent streams' if streams else 'request rate'}"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    what = "number of streams" if streams else "rate"
    return {"id": fid, "title": title, "file": _save(fig, out, fid),
            "caption": f"Every capacity probe of every round pooled per rung and {what}; bars: "
                       "95 % Wilson intervals. Dashed red: the attainment target; a rung's "
                       f"capacity is the highest {what} it kept above it."}


def load_curves(doc: Mapping[str, Any], load: Mapping[str, Any], out: Path
                ) -> dict[str, Any]:
    """Latency against load per rung: p50 (solid) and p99 (dotted) TTFT and TPOT against the
    closed-loop concurrency and against the open-loop rate, the configured limits drawn."""
    figs: dict[str, Any] = {}
    limits = (load.get("spec") or {}).get("limits") or {}
    names = [n for n in dict.fromkeys([*_order(doc), *(r["rung"] for r in load["table"])])
             if any(r["rung"] == n for r in load["table"])]
    for kind, xkey, xlabel in (("closed", "concurrency", "concurrent streams (closed loop)"),
                               ("open", "rate", "request rate, Poisson (requests/s)")):
        rows = [r for r in load["table"] if r["kind"] == kind]
        xs = sorted({r[xkey] for r in rows})
        fid = f"serving_load_{kind}"
        title = f"latency under load: {xlabel}"
        if not xs:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.4), squeeze=False)
        for ax, metric, lim in ((axes[0][0], "ttft", limits.get("ttft_ms")),
                                (axes[0][1], "tpot", limits.get("tpot_ms"))):
            for i, n in enumerate(names):
                color = "#999999" if n == doc.get("control") else COLORS[i % len(COLORS)]
                for q, style in (("p50", "-"), ("p99", ":")):
                    ys = []
                    for x in xs:
                        row = next((r for r in rows if r["rung"] == n and r[xkey] == x), None)
                        v = (row or {}).get("pooled", {}).get(f"{metric}_{q}_ms")
                        ys.append(v if isinstance(v, (int, float)) else float("nan"))
                    ax.plot(xs, ys, marker="o" if q == "p50" else "x", linestyle=style,
                            color=color, label=f"{n} {q}")
            if lim:
                ax.axhline(lim, color="#b22222", linewidth=1, linestyle="--",
                           label=f"limit {lim:g} ms")
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{metric.upper()} (ms)")
            ax.set_xticks(xs, [f"{x:g}" for x in xs])  # the levels measured, nothing between
            if lim:
                ax.annotate(f"limit {lim:g} ms", (xs[0], lim), textcoords="offset points",
                            xytext=(2, 3), fontsize=7, color="#b22222")
            ax.grid(alpha=0.3)
            ax.set_title(f"{metric.upper()} p50 (solid) and p99 (dotted)", fontsize=10)
        axes[0][1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        figs[f"load_{kind}"] = {
            "id": fid, "title": title, "file": _save(fig, out, fid),
            "caption": "Every request of every round pooled per rung and level (client clock); "
                       "a failed request counts as infinitely slow, so a percentile it reaches "
                       "is missing from the line. Dashed red: the goodput limit."}
    return figs


def depth_figures(doc: Mapping[str, Any], dp: Mapping[str, Any], out: Path
                  ) -> dict[str, Any]:
    """Per phase: each comparison's ratio against the context depth, with its intervals, 1x
    drawn (where a curve crosses it, the advantage has inverted)."""
    figs: dict[str, Any] = {}
    for phase, curves in (dp.get("curves") or {}).items():
        if not curves:
            continue
        fid = f"serving_depth_{phase}"
        title = f"long context: {phase} ratio against depth"
        fig, ax = plt.subplots(figsize=(6.4, 3.3))
        for i, c in enumerate(curves):
            s = c["series"]
            xs = [p["depth"] for p in s]
            ys = [p["estimate"] for p in s]
            lo = [p["estimate"] - (p["lo"] if p["lo"] is not None else p["estimate"]) for p in s]
            hi = [(p["hi"] if p["hi"] is not None else p["estimate"]) - p["estimate"] for p in s]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3,
                        color=COLORS[i % len(COLORS)], label=f"{c['rung']} / {c['base']}")
        ax.axhline(1.0, color="#555555", linewidth=0.8, linestyle="--")
        ax.set_yscale("log")
        ax.set_xlabel("context depth (tokens)")
        ax.set_ylabel("ratio (paired, with interval)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.set_title(title, fontsize=10)
        figs[f"depth_{phase}"] = {
            "id": fid, "title": title, "file": _save(fig, out, fid),
            "caption": "Each step and each rung over the floor at every depth: the geometric "
                       "mean of paired rounds with its interval (the anytime-valid design's). "
                       "Dashed: 1x, where an advantage ends."}
    return figs


# the figures of each experiment that runs its own tool (its key in the serving section; one
# without a figure has no entry): (doc, its value, out dir) -> {name: figure}
FIGURES = {"concurrency": concurrency_figures, "prefix_cache": prefix_cache_figures,
           "load": load_figures, "depth": depth_figures}
