"""Issue 33: the report's first screen is the ladder as one table and one picture, each gain
credited to what ran. Checked on the real default run's report (tests/fixtures/report-default/,
see tests/fixtures/README.md), in the Markdown, the terminal headline and a real browser."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ladder.reporting.overview import overview
from ladder.reporting.render import headline_lines, render_all

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "report-default" / "ladder.json"
DOC = json.loads(FIXTURE.read_text())


def test_one_table_holds_every_cell_and_rung():
    (table,) = overview(DOC)["tables"]  # one model
    assert table["rungs"][:2] == ["floor", "native_repack"]
    assert len(table["rows"]) == len(DOC["cells"]) == 9
    for row in table["rows"]:
        assert row["speeds"]["floor"] > 0 and row["speeds"]["native_repack"] > 0
        step = row["steps"]["floor>native_repack"]
        # every gross step of the default run is called and shows its ratio and mark
        assert step["call"] == "faster" and re.fullmatch(r"[\d.]+x ▲", step["text"]), step


def test_a_call_carries_its_interval_and_a_hedged_one_is_hollow():
    """Issue 56, item 2: the table's mark follows the decision on the interval: ▲ with the
    ratio and its interval when the interval lies wholly beyond δ, △ when it excludes 1 but
    reaches inside ±δ ("by less than δ not ruled out")."""
    from ladder.reporting.overview import step_mark

    def step(beyond, lo, hi):
        return {"ratio": {"estimate": 1.12},
                "verdict": {"call": "faster", "text": "t", "threshold": 0.05,
                            "beyond_threshold": beyond, "interval": [lo, hi]}}

    assert step_mark(step(True, 1.06, 1.18))["text"] == "1.12x ▲ [1.06x-1.18x]"
    hedged = step_mark(step(False, 1.02, 1.23))
    assert hedged["text"] == "1.12x △ [1.02x-1.23x]" and hedged["mark"] == "△"


def test_credit_is_said_once_per_rung_and_quant():
    ov = overview(DOC)
    keys = [(k["rung"], k["quant"]) for k in ov["cards"]]
    assert len(keys) == len(set(keys)) == len({(s["rung"], c["quant"]) for c in DOC["cells"]
                                               for s in c["steps"]})


def test_a_bundled_rung_credits_what_engaged_and_names_what_did_not():
    """Q8_0 on x86: no repack kernel, yet the native ISA and llamafile's sgemm engaged. The
    step was printed "not credited: evidence: repack no marker"; now the gain is credited to
    the engaged mechanisms and repack is named with its reason."""
    card = next(k for k in overview(DOC)["cards"]
                if k["quant"] == "q8_0" and k["rung"] == "native_repack")
    assert card["credit"].startswith("credited to native_isa, llamafile"), card["credit"]
    assert [ne["mechanism"] for ne in card["not_engaged"]] == ["repack"]
    assert "not engaged: repack (" in card["credit"]


def test_markdown_and_terminal_open_with_the_table(tmp_path):
    md = Path(render_all(FIXTURE, tmp_path, workdir=tmp_path)["md"]).read_text()
    head = md[: md.index("### Each rung × quant")]
    assert head.count("\n| Q") == 9 and "](figures/ladder_overview.png)" in head
    assert md.index("## The ladder") < md.index("Each step is attributed")
    lines = headline_lines(DOC, "ladder.html")
    assert "tokens/s per rung" in lines[0] and sum("x ▲" in ln for ln in lines[:11]) >= 9


def test_first_screen_in_chromium(tmp_path):
    """The whole ladder (table, legend, picture) above the fold of a 1280x1000 window."""
    from browser import find_chromium, open_page

    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI (.ci/run installs it)")
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    render_all(FIXTURE, tmp_path, workdir=tmp_path)
    js = """(() => {
      const bottom = s => document.querySelector(s).getBoundingClientRect().bottom;
      return {table: bottom('#ladder-table'), figure: bottom('#first-screen figure img'),
              fold: window.innerHeight,
              rows: document.querySelectorAll('#ladder-table tr').length,
              loaded: document.querySelector('#first-screen figure img').naturalWidth,
              links: Array.from(document.querySelectorAll('#ladder-table td.step a'))
                       .every(a => !!document.getElementById(a.hash.slice(1)))};
    })()"""
    shot = tmp_path / "first-screen.png"
    page = open_page((tmp_path / "ladder.html").as_uri(), js, shot, width=1280, height=1000)
    v = page["value"]
    assert page["failed"] == [] and v["rows"] == 10 and v["loaded"] > 300 and v["links"], v
    assert v["table"] < v["figure"] <= v["fold"], v  # no scrolling to see the ladder
    assert shot.stat().st_size > 50_000
    print(f"screenshot: {shot}")
