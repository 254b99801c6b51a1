"""What every report figure shares (matplotlib with the Agg backend, the rung colours, where a
figure's PNG goes): the core's figures (``figures``) and each registered section's own
(``serving_figures``, ``profile_figures``) draw with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3"]


def order(doc: Mapping[str, Any]) -> list[str]:
    """The report's rungs in ladder order, the control last."""
    return list(doc["ladder_order"]) + ([doc["control"]] if doc.get("control") else [])


def save(fig: Any, out_dir: Path, fid: str) -> str:
    path = out_dir / f"{fid}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path.name
