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


def test_a_null_entry_drops_a_default_workload(default_config):
    """config/README: a null entry of measure.workloads or dispatch.workloads drops that
    workload. Snakemake's default-filling validator filled dispatch entries' defaults into None
    (an AttributeError at start-up: found 2026-12-04 when the fleet test dropped one)."""
    from ladder.planning.config import validate_config
    from ladder.core.errors import LadderError

    cfg = copy.deepcopy(default_config)
    cfg["dispatch"]["workloads"]["prefill_long"] = None
    cfg["measure"]["workloads"]["pp128"] = None
    validate_config(cfg, SCHEMA)
    assert list(cfg["dispatch"]["workloads"]) == ["decode_short"]
    assert cfg["dispatch"]["workloads"]["decode_short"]["n_prompt"] == 0  # defaults filled
    assert "pp128" not in cfg["measure"]["workloads"] and "tg64" in cfg["measure"]["workloads"]
    cfg = copy.deepcopy(default_config)
    cfg["dispatch"]["workloads"] = {w: None for w in cfg["dispatch"]["workloads"]}
    with pytest.raises(LadderError, match=r"config\.dispatch\.workloads"):
        validate_config(cfg, SCHEMA)
