"""Config validation: one line naming the key at fault, then Snakemake's validator fills defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any, MutableMapping

import jsonschema
import yaml
from snakemake.utils import validate

from ladder.errors import LadderError


def first_error(config: Any, schema: dict[str, Any]) -> str | None:
    validator = jsonschema.Draft202012Validator(schema)
    err = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if err is None:
        return None
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return f"config{path}: {err.message}"


def validate_config(config: MutableMapping[str, Any], schema_path: str | Path) -> None:
    schema = yaml.safe_load(Path(schema_path).read_text())
    problem = first_error(config, schema)
    if problem:
        raise LadderError(problem)
    validate(config, str(schema_path))  # fills in the schema's defaults
