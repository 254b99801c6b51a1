"""Cost: the price entry that applies to a host, and $ per million tokens at that price."""

from __future__ import annotations

from typing import Any, Mapping

from ladder.core.errors import LadderError


def cost_table(cell: Mapping[str, Any], price: Mapping[str, Any] | None) -> dict[str, Any]:
    """$ per million tokens and tokens per dollar at the host instance's hourly price."""
    if not price:
        return {}
    out = {}
    for name, r in cell["rungs"].items():
        tps = r.get("median")
        if tps:
            out[name] = {"usd_per_mtok": price["usd_per_hour"] / (tps * 3600) * 1e6,
                         "tokens_per_usd": tps * 3600 / price["usd_per_hour"]}
    return out


def host_price(cost: Mapping[str, Any] | None,
               instance: str | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """The price entry of a host: its own ``instance`` (hosts[]), else cost.host_instance."""
    cost = cost or {}
    want = instance or cost.get("host_instance")
    key = "hosts[].instance" if instance else "cost.host_instance"
    if not want:
        return None, "cost.host_instance is not set: no price applies to this host"
    for p in cost.get("prices") or []:
        if p.get("instance") == want:
            return dict(p), None
    raise LadderError(f"{key}: {want!r} is not in cost.prices "
                      f"({', '.join(p.get('instance', '?') for p in cost.get('prices') or [])})")
