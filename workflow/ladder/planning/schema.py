"""The config schema (workflow/schemas/config.schema.yaml), read once per process: what
validates a config and fills in its defaults, and what declares the serving experiments
(``serving_experiments``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

CONFIG_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


@lru_cache(maxsize=None)
def load_schema(schema_path: str | Path = CONFIG_SCHEMA) -> dict[str, Any]:
    """The config schema, read once per process (never changed by its readers). libyaml's loader
    where PyYAML has it: every workflow parse reads this schema."""
    return dict(yaml.load(Path(schema_path).read_text(),
                          Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
