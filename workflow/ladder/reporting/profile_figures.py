"""The hotspots section's figure (registered in ``sections.SECTIONS``): where the time went per
rung, phase and thread count, from the report JSON alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ladder.reporting.plotting import plt
from ladder.reporting.plotting import save as _save


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

