"""Rendering the report JSON: schema, figures, Markdown/HTML, roofline and cost arithmetic.

tests/fixtures/report/ladder.json is a real report from the default run on this machine kind,
trimmed to the Q4_0 cells (see tests/fixtures/README.md).
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from ladder.measuring.bandwidth import probe
from ladder.core.errors import LadderError
from ladder.reporting.figures import thread_sweeps
from ladder.commands.render_command import main
from ladder.reporting.render import render_all, validate
from ladder.core.cost import cost_table, host_price
from ladder.reporting.report import roofline

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "report" / "ladder.json"


@pytest.fixture
def doc() -> dict:
    return json.loads(FIXTURE.read_text())


def test_fixture_renders_standalone_html_md_and_figures(tmp_path):
    paths = render_all(FIXTURE, tmp_path, workdir=tmp_path)
    html = Path(paths["html"]).read_text()
    md = Path(paths["md"]).read_text()
    pngs = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert pngs and all((tmp_path / "figures" / p).stat().st_size > 5000 for p in pngs)
    assert html.count("data:image/png;base64,") == len(pngs)  # every figure embedded
    assert not re.search(r"""(src|href)=["']https?:""", html)
    assert 'id="headline-table"' in html and 'id="ledger-table"' in html
    assert "## The ladder" in md and "## Every cell" in md
    assert "](figures/ladder_q4_0_tg64_t2.png)" in md and "](figures/ladder_overview.png)" in md


def test_deltas_under_the_noise_floor_never_show_as_multipliers(doc, tmp_path):
    render_all(FIXTURE, tmp_path, workdir=tmp_path)
    html = (tmp_path / "ladder.html").read_text()
    for c in doc["cells"]:
        for s in c["steps"]:
            if s["verdict"]["call"] in ("within noise", "cannot tell", "equivalent",
                                        "inconclusive"):
                assert "x faster" not in s["verdict"]["text"]
                assert s["verdict"]["text"] in html


def test_malformed_json_names_the_file(tmp_path):
    bad = tmp_path / "ladder.json"
    bad.write_text('{"format": "ladder-report/1", ')
    with pytest.raises(LadderError, match=re.escape(str(bad))):
        render_all(bad, tmp_path / "out")
    assert main([str(bad), "--out", str(tmp_path / "out")]) == 1


def test_a_document_that_is_not_a_report_names_the_path(doc):
    broken = copy.deepcopy(doc)
    del broken["cells"][0]["rungs"]
    with pytest.raises(LadderError, match=r"x\.json: not a ladder report at cells/0: 'rungs'"):
        validate(broken, "x.json")


def test_render_cli(tmp_path, capsys):
    assert main([str(FIXTURE), "--out", str(tmp_path)]) == 0
    assert "html:" in capsys.readouterr().out


def test_roofline_arithmetic():
    cell = {"workload_spec": {"n_prompt": 0, "n_gen": 64}, "model_size": 234_883_584,
            "model_n_params": 268_098_176, "rungs": {"a": {"median": 50.0}, "b": {"median": None}}}
    r = roofline(cell, bandwidth_gbps=10.0, peak_gflops=None)
    assert r["kind"] == "memory bandwidth"
    assert r["bound_tps"] == pytest.approx(10e9 / 234_883_584)
    assert r["rungs"] == {"a": pytest.approx(50.0 / (10e9 / 234_883_584))}
    pre = {**cell, "workload_spec": {"n_prompt": 128, "n_gen": 0}}
    assert roofline(pre, 10.0, None)["kind"] is None
    assert "peak_gflops" in roofline(pre, 10.0, None)["why_not"]
    r = roofline(pre, 10.0, peak_gflops=100.0)
    assert r["bound_tps"] == pytest.approx(100e9 / (2 * 268_098_176))


def test_cost_arithmetic_and_bad_instance():
    cell = {"rungs": {"a": {"median": 50.0}}}
    price, note = host_price({"host_instance": "c7g.large", "prices": [
        {"instance": "c7g.large", "usd_per_hour": 0.0725, "date": "2025-06", "source": "x"}]})
    t = cost_table(cell, price)
    assert t["a"]["usd_per_mtok"] == pytest.approx(0.0725 / (50 * 3600) * 1e6)
    assert t["a"]["tokens_per_usd"] == pytest.approx(50 * 3600 / 0.0725)
    assert host_price({"host_instance": None})[0] is None
    with pytest.raises(LadderError, match="cost.host_instance: 'm9.huge' is not in cost.prices"):
        host_price({"host_instance": "m9.huge", "prices": []})


def test_a_figure_without_data_says_why(doc, tmp_path):
    figs = thread_sweeps(doc, tmp_path)
    assert figs and all(f["file"] is None and "measure.threads" in f["why_not"] for f in figs)


def test_bandwidth_probe_records_every_repeat(tmp_path):
    out = probe(str(tmp_path / "bw.json"), size_mib=16, repeats=2)
    assert out["bandwidth_gbps"] > 0 and all(len(r["seconds"]) == 2 for r in out["runs"])
    assert json.loads((tmp_path / "bw.json").read_text())["format"] == "ladder-bandwidth/1"


def test_headline_lines_for_the_terminal(doc):
    from ladder.reporting.render import headline_lines

    lines = headline_lines(doc, "results/hosts/local/report/ladder.html")
    assert lines[-1] == "ladder: report: results/hosts/local/report/ladder.html"
    steps = sum(len(c["steps"]) for c in doc["cells"])
    assert sum(1 for ln in lines if ln.startswith("    ")) == steps  # one line per ladder step
    assert any("noise floor" in ln for ln in lines)
    assert any("rung amx crashed" in ln for ln in lines)  # a failed rung is named
