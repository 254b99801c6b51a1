"""The report's core figures (matplotlib, Agg), drawn from the report JSON alone; each
registered section draws its own (``sections.SECTIONS``' ``figures``: ``serving_figures``,
``profile_figures``), and ``draw_all`` calls them.

Each figure is a PNG file in the figures directory and is embedded in the HTML as a data URI.
A figure whose data is missing is not drawn; the reason is returned instead (e.g. a thread
sweep needs two thread counts in ``measure.threads``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib.ticker

from ladder.analysis.stats import phase_of
from ladder.reporting.plotting import COLORS, plt
from ladder.reporting.plotting import order as _order
from ladder.reporting.plotting import save as _save
from ladder.reporting.sections import SECTIONS


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
