from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def default_config() -> dict:
    return copy.deepcopy(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))


@pytest.fixture
def fixture_text():
    def read(rel: str) -> str:
        return (FIXTURES / rel).read_text()

    return read
