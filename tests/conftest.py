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
