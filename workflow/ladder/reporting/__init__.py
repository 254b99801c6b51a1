"""Reporting: the report JSON, its rendering and figures, the fleet, compare and bisect commands."""
