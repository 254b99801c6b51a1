from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def measure_block(**over) -> dict:
    """The ``measure`` settings as the schema fills them in, with ``over`` on top: what a bench
    cell's policy is built from (``harness.policy_from``); no default lives outside the schema."""
    from ladder.planning.config import schema_defaults

    return {**schema_defaults(ROOT / "workflow" / "schemas" / "config.schema.yaml", "measure"),
            **over}


def ladder_cell(tmp_path: Path, names=("floor", "native_repack", "vendor", "control"),
                name: str = "q4_0/pp128/t2"):
    """A synthetic cell of built rungs (no process runs), ``control`` the twin of
    native_repack: what the harness tests measure their scripted experiments on."""
    from ladder.measuring import harness

    tmp_path.mkdir(parents=True, exist_ok=True)
    rungs = []
    for n in names:
        prov = tmp_path / f"{n}.json"
        prov.write_text(json.dumps({"status": "ok", "bin_dir": str(tmp_path), "build_key": n}))
        rungs.append({"name": n, "provenance": str(prov), "runtime": {},
                      "twin_of": "native_repack" if n == "control" else None})
    return harness.open_cell(name, rungs, str(tmp_path / "raw"), seed=7)


def sequential_policy(budget_s=None, phase: str = "prefill", **seq):
    """A cell's policy with the anytime-valid design on (its settings the schema's, ``seq``
    on top), one process per rung and round, no CPU placement."""
    from ladder.measuring import harness

    block = {**{k: v for k, v in measure_block().items() if k in ("disturbance", "cpus")},
             "rounds": 3, "timeout_s": 60, "warmup_rounds": 0, "repetitions": 1,
             "round_statistic": "mean", "warmup": True, "seed": 7, "cpus": "none",
             "sequential": {**measure_block()["sequential"], "enabled": True, **seq}}
    return harness.policy_from(block, threads=1, phase=phase, budget_s=budget_s)


@pytest.fixture
def default_config() -> dict:
    return copy.deepcopy(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))


@pytest.fixture
def fixture_text():
    def read(rel: str) -> str:
        return (FIXTURES / rel).read_text()

    return read


class _TestTimes:
    """Appends each test phase's wall time (and the session's) to $LADDER_TEST_TIMES as JSON
    lines: .ci/minutes.py turns them into CI's table of minutes per module. Written by the
    controlling process only (pytest-xdist forwards its workers' reports to it)."""

    def __init__(self, path: str, config: pytest.Config) -> None:
        self.path = path
        self.xdist = bool(getattr(config.option, "numprocesses", None))
        self.markexpr = config.option.markexpr or ""
        self.t0 = time.time()

    def _write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._write({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                     "start": report.start, "stop": report.stop, "xdist": self.xdist})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._write({"session": self.markexpr, "start": self.t0, "stop": time.time(),
                     "xdist": self.xdist})


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("LADDER_TEST_TIMES")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_TestTimes(path, config), "ladder_test_times")
