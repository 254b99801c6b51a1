"""The report's figures (matplotlib, Agg), drawn from the report JSON alone.

Each figure is a PNG file in the figures directory and is embedded in the HTML as a data URI.
A figure whose data is missing is not drawn; the reason is returned instead (e.g. a thread
sweep needs two thread counts in ``measure.threads``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from ladder.planning.serving_experiments import EXPERIMENTS, LEVERS
from ladder.reporting.sections import SECTIONS
from ladder.analysis.stats import phase_of

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3"]


def _order(doc: Mapping[str, Any]) -> list[str]:
    return list(doc["ladder_order"]) + ([doc["control"]] if doc.get("control") else [])


def _save(fig: Any, out_dir: Path, fid: str) -> str:
    path = out_dir / f"{fid}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path.name


def ladder_bars(doc: Mapping[str, Any], cell: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    names = [n for n in _order(doc) if cell["rungs"].get(n, {}).get("median")]
    fid = f"ladder_{cell['quant']}_{cell['workload']}_t{cell['threads']}"
    title = (f"{cell['model']['model']} {cell['quant'].upper()} · {cell['workload']} · "
             f"{cell['threads']} threads")
    if not names:
        return {"id": fid, "title": title, "file": None, "why_not": "no rung was measured"}
    med = [cell["rungs"][n]["median"] for n in names]
    lo = [m - (cell["rungs"][n]["ci"] or [m, m])[0] for n, m in zip(names, med)]
    hi = [(cell["rungs"][n]["ci"] or [m, m])[1] - m for n, m in zip(names, med)]
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    colors = ["#999999" if n == doc.get("control") else COLORS[i % len(COLORS)]
              for i, n in enumerate(names)]
    ax.bar(names, med, yerr=[lo, hi], capsize=4, color=colors)
    for i, (m, h) in enumerate(zip(med, hi)):
        ax.annotate(f"{m:.1f}", (i, m + h), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    ax.margins(y=0.12)
    ax.set_ylabel("tokens/s (median, 95 % CI)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid),
            "caption": f"Throughput per rung, median of {cell['rounds']} interleaved rounds with "
                       "the bootstrap CI; grey = the control (the build twice: the A/A check)."}


def ladder_overview(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    """The first screen's picture: per phase, tokens/s up the ladder (log scale), one line per
    quant (its largest workload of that phase, at the most threads), each called step's ratio
    written on its segment; a step not called is drawn dashed."""
    fid, title = "ladder_overview", "What each rung bought, per quant and phase"
    ladder = [n for n in doc["ladder_order"]
              if any((c["rungs"].get(n) or {}).get("median") for c in doc.get("cells") or [])]
    best: dict[tuple[str, str], Mapping[str, Any]] = {}
    for c in doc.get("cells") or []:
        spec = c.get("workload_spec") or {}
        size = int(spec.get("n_prompt") or 0) + int(spec.get("n_gen") or 0)
        key = (c.get("phase") or phase_of(spec), c["quant"])
        have = best.get(key)
        if have is None or (c["threads"], size) > (have["threads"], int(
                (have.get("workload_spec") or {}).get("n_prompt") or 0)
                + int((have.get("workload_spec") or {}).get("n_gen") or 0)):
            best[key] = c
    phases = [p for p in ("prefill", "decode") if any(k[0] == p for k in best)]
    if not phases:
        return {"id": fid, "title": title, "file": None, "why_not": "no bench cell"}
    fig, axes = plt.subplots(1, len(phases), figsize=(4.6 * len(phases), 2.9), squeeze=False)
    for ax, phase in zip(axes[0], phases):
        quants = sorted(q for p, q in best if p == phase)
        for i, quant in enumerate(quants):
            c = best[(phase, quant)]
            xs = [k for k, n in enumerate(ladder) if (c["rungs"].get(n) or {}).get("median")]
            ys = [c["rungs"][ladder[k]]["median"] for k in xs]
            color = COLORS[i % len(COLORS)]
            ax.plot(xs, ys, marker="o", color=color, linewidth=0,
                    label=f"{quant.upper()} {c['workload']}")
            steps = {(s["base"], s["rung"]): s for s in c.get("steps") or []}
            for (x0, y0), (x1, y1) in zip(zip(xs, ys), list(zip(xs, ys))[1:]):
                s = steps.get((ladder[x0], ladder[x1]))
                called = s is not None and s["verdict"]["call"] in ("faster", "slower")
                ax.plot([x0, x1], [y0, y1], color=color, linestyle="-" if called else "--",
                        linewidth=1.6 if called else 1.0)
                if called and s is not None:  # beside its segment's upper end, a line per quant
                    ax.annotate(f"{s['ratio']['estimate']:.3g}x", (x1, y1), fontsize=8,
                                color=color, xytext=(6, -4 - 10 * i), textcoords="offset points")
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(range(len(ladder)), ladder, fontsize=8)
        ax.set_xlim(-0.3, len(ladder) - 0.4)
        ax.set_title(phase, fontsize=10)
        ax.set_ylabel("tokens/s (median)")
        ax.grid(alpha=0.3, which="both", axis="y")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid),
            "caption": "Solid segment: a step called faster or slower (its ratio written on "
                       "it); dashed: not called (equivalent, inconclusive or not judged). "
                       "Log scale: equal heights are equal ratios."}


def _curve(doc: Mapping[str, Any], cells: list[Mapping[str, Any]], x_of: Any, xlabel: str,
           fid: str, title: str, caption: str, out_dir: Path) -> dict[str, Any]:
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for i, name in enumerate(_order(doc)):
        pts = sorted((x_of(c), c["rungs"][name]["median"]) for c in cells
                     if c["rungs"].get(name, {}).get("median"))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                    color="#999999" if name == doc.get("control") else COLORS[i % len(COLORS)])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("tokens/s (median)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid), "caption": caption}


def prefill_curves(doc: Mapping[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    out = []
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for c in doc["cells"]:
        spec = c.get("workload_spec") or {}
        if spec.get("n_prompt") and not spec.get("n_gen"):
            groups.setdefault((c["quant"], c["threads"]), []).append(c)
    for (quant, threads), cells in sorted(groups.items()):
        fid = f"prefill_{quant}_t{threads}"
        title = f"{quant.upper()} prefill length · {threads} threads"
        if len({c["workload_spec"]["n_prompt"] for c in cells}) < 2:
            out.append({"id": fid, "title": title, "file": None,
                        "why_not": "one prefill length measured: add prefill workloads with "
                                   "other n_prompt to measure.workloads"})
            continue
        out.append(_curve(doc, cells, lambda c: c["workload_spec"]["n_prompt"], "prompt tokens",
                          fid, title, "Prefill throughput vs prompt length per rung.", out_dir))
    return out


def thread_sweeps(doc: Mapping[str, Any], out_dir: Path) -> list[dict[str, Any]]:
    out = []
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for c in doc["cells"]:
        groups.setdefault((c["quant"], c["workload"]), []).append(c)
    for (quant, workload), cells in sorted(groups.items()):
        fid = f"threads_{quant}_{workload}"
        title = f"{quant.upper()} {workload} · thread sweep"
        if len({c["threads"] for c in cells}) < 2:
            out.append({"id": fid, "title": title, "file": None,
                        "why_not": f"one thread count measured ({cells[0]['threads']}): set "
                                   "measure.threads to e.g. [1, all]"})
            continue
        out.append(_curve(doc, cells, lambda c: c["threads"], "threads", fid, title,
                          "Throughput vs thread count per rung.", out_dir))
    return out


def drift_scatter(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    fid = "drift_vs_speedup"
    title = "Quality drift vs speedup over the floor"
    pts = []
    for c in doc["cells"]:
        for s in c["vs_floor"]:
            q = (doc.get("quality") or {}).get(c["quant"], {}).get(s["rung"]) or {}
            kld = (q.get("kld") or {}).get("kld_mean")
            if kld is not None and s["ratio"].get("estimate"):
                pts.append((s["ratio"]["estimate"], kld, f"{s['rung']} {c['quant']} {c['workload']}",
                            bool((s.get("drift") or {}).get("flag"))))
    if not pts:
        return {"id": fid, "title": title, "file": None,
                "why_not": "no rung has both a speedup over the floor and a KL divergence"}
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for x, y, label, flag in pts:
        ax.scatter(x, y, color="#c44e52" if flag else "#4c72b0", s=30)
        ax.annotate(label, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    tol = (doc.get("quality_tolerance") or {}).get("kld_mean")
    if tol:
        ax.axhline(tol, color="#c44e52", ls="--", lw=1, label=f"KLD tolerance {tol}")
        ax.legend(fontsize=8)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("speedup over the floor (geometric mean of paired ratios)")
    ax.set_ylabel("mean KL divergence vs floor")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid),
            "caption": "Each point is a rung x quant x workload; red = past the drift tolerance."}


def roofline_bars(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    fid = "roofline_decode"
    title = "Decode throughput as % of the memory-bandwidth roofline"
    rows = [(f"{c['quant']} {c['workload']} t{c['threads']}", name, pct * 100)
            for c in doc["cells"] if (c.get("roofline") or {}).get("kind") == "memory bandwidth"
            for name, pct in c["roofline"]["rungs"].items()]
    if not rows:
        return {"id": fid, "title": title, "file": None,
                "why_not": "no decode cell with a bandwidth probe"}
    groups = sorted({r[0] for r in rows})
    names = [n for n in _order(doc) if any(r[1] == n for r in rows)]
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        vals = [next((r[2] for r in rows if r[0] == g and r[1] == name), 0.0) for g in groups]
        ax.bar([j + i * width for j in range(len(groups))], vals, width, label=name,
               color="#999999" if name == doc.get("control") else COLORS[i % len(COLORS)])
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(groups))])
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel("% of bandwidth / model bytes")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    bw = (doc.get("bandwidth") or {}).get("bandwidth_gbps")
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid),
            "caption": f"Roofline = measured copy bandwidth ({bw} GB/s) / model bytes per token."}


def hotspot_bars(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Any] | None:
    """Per rung (and quant), a stacked bar of sampled time by family / group; prefill and
    decode side by side, at the largest sampled thread count."""
    hs = doc.get("hotspots")
    if not hs:
        return None
    fid, title = "hotspots", "Where the time goes: share of samples by kernel family and group"
    ok = [c for c in hs["cells"] if c.get("status") == "ok"]
    if not ok:
        return {"id": fid, "title": title, "file": None,
                "why_not": hs.get("unavailable") or "no cell was sampled"}
    threads = max(c["threads"] for c in ok)
    every = [c for c in hs["cells"] if c["threads"] == threads]  # a failed cell: said in place
    groups = [g for g in hs["groups"] if any((c.get("groups") or {}).get(g) for c in every)]
    phases = [p for p in ("prefill", "decode") if any(c["phase"] == p for c in every)]
    fig, axes = plt.subplots(1, len(phases), figsize=(5.2 * len(phases), 4.0), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, phase in zip(axes[0], phases):
        cells = [c for c in every if c["phase"] == phase]
        labels = [f"{c['rung']}\n{c['quant'].upper()}" for c in cells]
        for i, c in enumerate(cells):
            if c.get("status") != "ok":
                ax.text(i, 50, f"not sampled:\n{str(c.get('reason'))[:28]}", rotation=90,
                        ha="center", va="center", fontsize=6, color="#b00020")
        bottom = [0.0] * len(cells)
        for gi, g in enumerate(groups):
            vals = [100 * (c.get("groups") or {}).get(g, 0.0) for c in cells]
            ax.bar(range(len(cells)), vals, 0.7, bottom=bottom, label=g, color=cmap(gi % 20))
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(cells)))
        ax.set_xticklabels(labels, fontsize=6, rotation=45, ha="right")
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of samples")
        ax.set_title(f"{phase} ({cells[0]['workload']}, {threads} threads)", fontsize=9)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title, fontsize=10)
    return {"id": fid, "title": title, "file": _save(fig, out_dir, fid),
            "caption": "perf record -e cpu-clock over one llama-bench run per bar (model load "
                       "included); each symbol grouped by workflow/data/kernel_families.yaml."}


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
    conc = srv.get("concurrency")
    if conc and conc.get("points"):
        pts = [{"x": p["parallel"], "cell": p["cell"]} for p in conc["points"]]
        figs["concurrency"] = serving_curve(
            doc, pts, "serving_concurrency", "concurrency: total throughput",
            "parallel sequences (llama-batched-bench -npl)",
            "All sequences' tokens per second of batch time, median per rung.", out)
    pc = srv.get("prefix_cache")
    if pc and pc.get("cache"):
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
        figs["prefix_cache"] = {"id": fid, "title": "prefix cache: TTFT per rung",
                                "file": _save(fig, out, fid),
                                "caption": "llama-server's own prompt+first-token time, median "
                                           "of the interleaved rounds (log scale)."}
    load = srv.get("load")
    if load and load.get("table"):
        figs.update(load_curves(doc, load, out))
    for key, name in (("capacity", "load_capacity"),
                      ("concurrency_capacity", "load_concurrency_capacity")):
        if load and load.get(key):
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


def draw_all(doc: Mapping[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """All figures: {'ladder': {cell key: fig}, 'prefill': [...], 'threads': [...], ...}."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return {
        "overview": ladder_overview(doc, out),
        "ladder": {f"{c['quant']}/{c['workload']}/t{c['threads']}": ladder_bars(doc, c, out)
                   for c in doc["cells"]},
        "prefill": prefill_curves(doc, out),
        "threads": thread_sweeps(doc, out),
        "drift": drift_scatter(doc, out),
        "roofline": roofline_bars(doc, out),
        # each registered section's own (ladder.sections): a figure, a dict of them, or None
        **{s.key: s.drawer()(doc, out) for s in SECTIONS if s.figures},  # type: ignore[misc]
    }


def section_figures(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The registered sections' figures, flat (for the HTML's embedded images)."""
    out = []
    for s in SECTIONS:
        got = figures.get(s.key)
        if isinstance(got, Mapping) and "file" in got:
            out.append(dict(got))
        elif isinstance(got, Mapping):
            out += [dict(f) for f in got.values() if f]
    return out
