"""Bad configs stop with a message naming the key or value at fault."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

SCHEMA = str(Path(__file__).resolve().parents[1] / "workflow" / "schemas" / "config.schema.yaml")


def check(cfg: dict) -> dict:
    cfg = copy.deepcopy(cfg)
    validate(cfg, SCHEMA)
    return cfg


def test_default_config_is_valid_and_defaults_are_filled(default_config):
    cfg = check(default_config)
    assert cfg["resources_dir"] == "resources"
    assert cfg["build"]["generator"] == "Ninja"
    assert cfg["stats"]["confidence"] == 0.95


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c.update(rounds=5), "rounds"),  # unknown top-level key
        (lambda c: c["measure"].update(round=5), "round"),  # mistyped nested key
        (lambda c: c["measure"].update(rounds=0), "0"),
        (lambda c: c["source"].update(sha256="abc"), "abc"),
        (lambda c: c.update(source={"kind": "git", "url": "x", "commit": "0c1e570"}), "0c1e570"),
        (lambda c: c.update(source={"kind": "svn"}), "svn"),
        (lambda c: c["models"]["gemma3-270m"].update(sha256="A" * 64), "AAAA"),
        (lambda c: c["models"]["gemma3-270m"].pop("module"), "module"),
        (lambda c: c["ladders"]["x86_64"]["rungs"][0].update(name="Floor Rung"), "Floor Rung"),
        (lambda c: c["ladders"]["x86_64"]["rungs"][1]["markers"].append({"mechanism": "x"}),
         "mechanism"),
        (lambda c: c["measure"].update(threads=["many"]), "many"),
    ],
)
def test_bad_configs_name_the_fault(default_config, mutate, expected):
    mutate(default_config)
    with pytest.raises(WorkflowError) as exc:
        check(default_config)
    assert expected in str(exc.value)
