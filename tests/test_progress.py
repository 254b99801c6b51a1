"""The start of a run's plan summary (``ladder.planning.announce``)."""

from __future__ import annotations

import re
from pathlib import Path

from ladder.core import codeid
from ladder.planning import announce

ROOT = Path(__file__).resolve().parents[1]


def workflow_rules() -> set[str]:
    return {m.group(1) for smk in (ROOT / "workflow" / "rules").glob("*.smk")
            for m in re.finditer(r"^rule (\w+):", smk.read_text(), re.M)}


def test_every_measurement_rule_is_a_rule_of_the_workflow():
    """The list had named three rules that no longer existed (serve_prefix, serve_concurrency,
    serve_load) and the Snakefile overwrote it at start."""
    rules = workflow_rules()
    assert set(announce.MEASUREMENT_RULES) <= rules, sorted(set(announce.MEASUREMENT_RULES)
                                                            - rules)
    assert {"bench", "serve", "dispatch", "quality"} <= set(announce.MEASUREMENT_RULES)
    assert "progress.MEASUREMENT_RULES" not in (ROOT / "Snakefile").read_text()


def test_no_measuring_rule_reaches_the_plan_summary():
    """Editing what the start of a run prints re-measures nothing."""
    for script in ("bench", "dispatch", "quality", "evidence", "serve_bench", "bandwidth"):
        assert "announce" not in codeid.code_modules(script), script


def test_the_plan_summary_counts_measurements_and_previous_times():
    lines = announce.plan_summary([("bench", 120.0), ("bench", None), ("build", 30.0),
                                   ("serve", 65.0), ("report", None)])
    assert lines[0] == ("ladder: 5 jobs planned, 3 of them measurements (bench 2, serve 1)")
    assert lines[1] == ("ladder: expected cost from the previous run's recorded job times: "
                        "3.6 min for 3 jobs; 2 jobs have no recorded time")
    assert announce.plan_summary([]) == []
    first = announce.plan_summary([("build", None)])
    assert first[1].startswith("ladder: no recorded job times yet")
    assert announce.previous_seconds([(10.0, 25.0), (10.0, 12.0), (None, 5.0)]) == 15.0
