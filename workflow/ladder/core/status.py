"""A rung's status in a measuring job when its build gave no binaries (kept apart from the
build code, so the measuring rules' code identity does not reach it)."""

from __future__ import annotations

from typing import Any, Mapping


def unbuilt_status(prov: Mapping[str, Any]) -> str:
    """A job's status for a rung whose build did not give binaries."""
    return "not_applicable" if prov.get("status") == "not_applicable" else "build_failed"
