"""What a report section's builder gets (``SectionContext``): the analysis layer's own type, so
the views that take it (``reconcile``, ``serving_view``, ``profile_view``) never import the
report's registry (``reporting/sections``, which hands it over)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass
class SectionContext:
    """The host's plan, the stats settings, the section's own named inputs (file lists), and
    the report's list of missing or unreadable inputs to add to."""
    plan: Mapping[str, Any]
    stats_cfg: Mapping[str, Any]
    files: Mapping[str, Sequence[str]]
    missing: list[dict[str, str]] = field(default_factory=list)
    price: Mapping[str, Any] | None = None  # the host's price entry (cost), when one applies
