"""`ladder compare` on bad input (tests/test_resume.py compares two real runs end to end)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ladder.commands import compare_command
from ladder.reporting import compare
from ladder.core.errors import LadderError

FIX = Path(__file__).parent / "fixtures"
REPORT = FIX / "report" / "ladder.json"  # a real default run (tests/fixtures/README.md)


def test_another_format_is_named(tmp_path):
    other = FIX / "x86_64" / "quality" / "q4_0-floor.json"  # a real ladder-quality/1 record
    with pytest.raises(LadderError, match=r"q4_0-floor.json: not a ladder report \(format "
                                          r"'ladder-quality/1', expected 'ladder-report/1'\)"):
        compare.load_report(str(other))
    with pytest.raises(LadderError, match="not a ladder report"):
        bad = tmp_path / "list.json"
        bad.write_text("[1, 2]")
        compare.load_report(str(bad))


def test_two_reports_with_nothing_in_common_are_refused():
    base = compare.load_report(str(REPORT))
    new = copy.deepcopy(base)
    for c in new["cells"]:
        c["threads"] += 6  # another machine size: no cell at the same thread count
    with pytest.raises(LadderError, match="share no model x quant x workload x threads cell"):
        compare.compare(base, new)


def test_cells_whose_workload_differs_are_not_compared():
    base = compare.load_report(str(REPORT))
    new = copy.deepcopy(base)
    new["cells"][0]["workload_spec"] = {"n_prompt": 512, "n_gen": 0}
    out = compare.compare(base, new)
    c = base["cells"][0]
    assert {"cell": f"{c['quant']} {c['workload']} t{c['threads']}",
            "differ": ["workload spec"]} in out["not_comparable"]
    assert not any(r["cell"] == out["not_comparable"][0]["cell"] for r in out["rows"])


def test_unknown_gate_is_named():
    base = compare.load_report(str(REPORT))
    with pytest.raises(LadderError, match="--fail-on: faster unknown"):
        compare.gate(compare.compare(base, base), ["faster"])


def test_cli_error_is_one_line(tmp_path, capsys):
    assert compare_command.main([str(tmp_path / "missing.json"), str(REPORT)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ladder compare: ") and len(err.strip().splitlines()) == 1


def test_a_rung_without_rounds_says_why():
    base = compare.load_report(str(REPORT))  # its report predates round means: none has rounds
    out = compare.compare(base, base)
    amx = next(r for r in out["rows"] if r["rung"] == "amx")
    assert amx["call"] == "not measured"
    assert "BASE: crashed, killed by SIGILL" in amx["text"] or "BASE: crashed" in amx["text"]


def test_cells_taken_with_another_round_statistic_are_not_compared():
    base = compare.load_report(str(REPORT))
    new = copy.deepcopy(base)
    for c in new["cells"]:
        c["repetitions"], c["round_statistic"] = 5, "best"
    doc = compare.compare(base, new)
    assert not doc["rows"]
    assert {"round statistic (llama-bench repetitions and how a round is taken)"} == \
        {d for nc in doc["not_comparable"] for d in nc["differ"]}


def test_a_serving_regression_under_load_fails_the_gate():
    """Issue 43, item 5: the load section's judged metrics are compared like cells (NEW/BASE of
    the per-round values, Welch), and a called slowdown is a ``slower`` finding."""
    from test_serving_load import PLAN, STATS, synthetic_doc

    from ladder.analysis.load_view import summarize_load

    base = compare.load_report(str(REPORT))
    base.setdefault("serving", {})["load"] = summarize_load(synthetic_doc(), PLAN, STATS)
    same = copy.deepcopy(base)
    new = copy.deepcopy(base)
    new["serving"]["load"] = summarize_load(synthetic_doc(fast_ttft=0.2), PLAN, STATS)
    result = compare.compare(base, new)
    rows = {(r["cell"], r["rung"]): r for r in result["load_rows"]}
    slow = rows[("load c1 p99 TTFT", "fast")]
    assert slow["call"] == "slower" and 0.4 < slow["ratio"]["estimate"] < 0.6, slow
    assert rows[("load c1 p99 TTFT", "floor")]["call"] != "slower"
    failed = compare.gate(result, ["slower"])
    assert any(f.startswith("slower: load c1 p99 TTFT fast: ") for f in failed), failed
    md, html = compare.render(result)
    assert "## Serving under load" in md and "| c1 p99 TTFT | `fast` |" in md
    assert 'id="load-rows"' in html
    # the same run against itself: nothing called slower
    assert not [f for f in compare.gate(compare.compare(base, same), ["slower"])
                if f.startswith("slower: load")]
    # another load spec is not compared, and said so
    other = copy.deepcopy(new)
    other["serving"]["load"]["spec"] = {**other["serving"]["load"]["spec"], "n_prompt": 64}
    res = compare.compare(base, other)
    assert res["load_rows"] == [] and {"cell": "serving under load", "differ": ["n_prompt"]} \
        in res["not_comparable"]
    # measured in one run only
    del other["serving"]["load"]
    assert compare.compare(base, other)["only_in"]["BASE"][-1] == "serving under load"
