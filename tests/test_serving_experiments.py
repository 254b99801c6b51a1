"""The serving experiments that run their own tool (issue 44, item 5): each is declared by its
config block's ``x-serving`` and the rule, its result path, its inputs, the start-up checks, the
serving section's inputs, analysis, schema, templates and figures iterate them. A new one
touches its measuring module, its config block (config.schema.yaml) and its line in
config/README.md, its summary (analysis/serving_view.py's VIEWS), its figure if it draws one
(reporting/serving_figures.py's FIGURES), its two template parts and its schema fragment: eight
files. These tests wire a made-up experiment through every one of those places."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re
import runpy
import shutil
import sys
import types
from pathlib import Path

import pytest
import yaml

from ladder.analysis import serving_view
from ladder.core.errors import LadderError
from ladder.planning import config as config_mod
from ladder.planning.schema import CONFIG_SCHEMA
from ladder.planning.serving_experiments import EXPERIMENTS, ServerExperiment, server_experiments
from ladder.reporting import figures, render, sections, serving_figures
from ladder.reporting.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "report" / "ladder.json"
RULES = ROOT / "workflow" / "rules"


@pytest.mark.parametrize("exp", server_experiments(), ids=lambda e: e.key)
def test_every_experiment_has_its_parts(exp):
    assert exp.key not in EXPERIMENTS  # no llama-bench experiment of the same name
    module, _, function = exp.measure.partition(":")
    entry = getattr(importlib.import_module(f"ladder.measuring.{module}"), function)
    params = inspect.signature(entry).parameters
    # what scripts/serve.py passes: the same six, and each declared input by name
    assert list(params)[:6] == ["rungs", "block", "settings", "paths", "threads", "own_cpus"]
    assert [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY] == list(exp.inputs)
    assert exp.key in serving_view.VIEWS
    (serving,) = [s for s in SECTIONS if s.key == "serving"]
    assert exp.key in serving.subkeys and f"serving_{exp.key}" in serving.inputs
    for kind, path in serving.subparts()[exp.key].items():
        assert path.is_file(), (exp.key, kind)
    block = yaml.safe_load(CONFIG_SCHEMA.read_text())["properties"]["serving"]["properties"]
    assert "enabled" in block[exp.key]["properties"]
    assert re.search(rf"^\s*-?\s*`?serving\.{exp.key}\b|`{exp.key}`",
                     (ROOT / "config" / "README.md").read_text(), re.M), exp.key


def test_the_wiring_names_no_experiment():
    """One rule runs them all, and the workflow's wiring iterates the declarations."""
    smk = (RULES / "serving.smk").read_text()
    assert smk.count('"../../scripts/serve.py"') == 1
    assert 'experiment="|".join(SERVER_EXPERIMENTS)' in smk
    common = (RULES / "common.smk").read_text()
    wiring = "\n".join(re.search(rf"\ndef {fn}\(wildcards\):\n(.*?)\n\n\n", common, re.S).group(1)
                       for fn in ("serving_files", "server_settings", "server_inputs",
                                  "server_module"))
    for exp in server_experiments():
        for text in (smk, wiring, (ROOT / "scripts" / "serve.py").read_text()):
            assert not re.search(rf"\b{exp.key}\b", text), exp.key


def toy_schema(tmp_path: Path, **declared: object) -> Path:
    """A copy of the config schema with a made-up experiment ``toy`` declared in it."""
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    schema["properties"]["serving"]["properties"]["toy"] = {
        "type": "object", "additionalProperties": False, "default": {},
        "x-serving": declared or {"measure": "toy_module:run", "tool": "llama-server",
                                  "inputs": ["corpus"]},
        "properties": {"enabled": {"type": "boolean", "default": False},
                       "words": {"type": "integer", "default": 3}}}
    path = tmp_path / f"config{len(list(tmp_path.glob('*.yaml')))}.schema.yaml"  # read once each
    path.write_text(yaml.safe_dump(schema, sort_keys=False))
    return path


def test_an_experiment_is_declared_by_its_config_block(tmp_path, default_config, monkeypatch):
    path = toy_schema(tmp_path)
    assert server_experiments(path)[-1] == ServerExperiment("toy", "toy_module:run",
                                                            "llama-server", ("corpus",))
    assert server_experiments(path)[-1].module == "toy_module"
    # its defaults come from its block; its tool is a start-up check
    serving = {**default_config["serving"], "toy": {"enabled": True}}
    for e in server_experiments():  # the others off: only toy's tool is missing
        serving[e.key] = {**serving[e.key], "enabled": False}
    cfg = {**default_config, "serving": serving}
    cfg["build"] = {**cfg["build"], "targets": ["llama-bench"]}
    config_mod.validate_config(cfg, path)
    assert cfg["serving"]["toy"] == {"enabled": True, "words": 3}
    monkeypatch.setattr(config_mod, "server_experiments", lambda: server_experiments(path))
    with pytest.raises(LadderError, match=r"serving\.toy needs llama-server"):
        config_mod.check_config(cfg, [])
    # a declaration with a key no one reads, or a llama-bench experiment's name, is refused
    with pytest.raises(LadderError, match=r"serving\.toy\.x-serving: unknown keys \['rule'\]"):
        server_experiments(toy_schema(tmp_path, measure="m:f", tool="t", rule="x"))
    with pytest.raises(LadderError, match=r"serving\.toy\.x-serving: no \['tool'\]"):
        server_experiments(toy_schema(tmp_path, measure="m:f"))
    schema = yaml.safe_load(CONFIG_SCHEMA.read_text())
    block = schema["properties"]["serving"]["properties"]["context"]
    block["x-serving"] = {"measure": "m:f", "tool": "t"}
    clash = tmp_path / "clash.schema.yaml"
    clash.write_text(yaml.safe_dump(schema))
    with pytest.raises(LadderError, match=r"serving\.context is a llama-bench experiment"):
        server_experiments(clash)


def toy_summary(doc, plan, stats_cfg):
    return {"words": [s["word"] for s in doc["samples"]], "said": None}


def toy_figures(doc, value, out):
    from ladder.reporting.plotting import plt, save

    fig, ax = plt.subplots()
    ax.bar(range(len(value["words"])), [len(w) for w in value["words"]])
    return {"toy": {"id": "serving_toy", "title": "toy", "file": save(fig, out, "serving_toy"),
                    "caption": "c"}}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The made-up experiment's parts: its view, its figure, its two template parts and its
    schema fragment (in copies of the template and schema folders)."""
    templates, schemas = tmp_path / "templates", tmp_path / "schemas"
    shutil.copytree(render.TEMPLATES, templates)
    shutil.copytree(sections.SCHEMAS, schemas)
    (templates / "sections" / "serving" / "toy.md.j2").write_text(
        '{% set toy = srv.get("toy") %}\n{% if toy %}\n\n### Toy experiment\n\n'
        '{{ toy.words | join(", ") }} ({{ toy.said }})\n{% endif %}\n')
    (templates / "sections" / "serving" / "toy.html.j2").write_text(
        '{% set toy = srv.get("toy") %}\n{% if toy %}<h3 id="serving-toy">Toy experiment</h3>'
        '<p>{{ toy.words | join(", ") }}</p>{{ fig(figures.serving.get("toy")) }}\n{% endif %}\n')
    (schemas / "serving" / "toy.schema.yaml").write_text(
        "type: object\nrequired: [words]\nproperties: {words: {type: array, items: "
        "{type: string}}}\n")

    def said(value):
        value["said"] = "after the multiplicity step"

    monkeypatch.setitem(serving_view.VIEWS, "toy",
                        serving_view.ServerView(toy_summary, lambda v: [], said))
    monkeypatch.setitem(serving_figures.FIGURES, "toy", toy_figures)
    registered = tuple(dataclasses.replace(s, subkeys=(*s.subkeys, "toy"))
                       if s.key == "serving" else s for s in SECTIONS)
    for module in (sections, render, figures):
        monkeypatch.setattr(module, "SECTIONS", registered)
    monkeypatch.setattr(sections, "TEMPLATES", templates / "sections")
    monkeypatch.setattr(sections, "SCHEMAS", schemas)
    monkeypatch.setattr(render, "TEMPLATES", templates)


def test_a_made_up_experiment_reaches_the_report(toy, tmp_path):
    fixture = json.loads(FIXTURE.read_text())
    result = tmp_path / "toy.json"
    result.write_text(json.dumps({"samples": [{"word": "served"}, {"word": "twice"}]}))
    missing: list = []
    value = serving_view.serving_section(
        plan=fixture["plan"], stats_cfg=fixture["provenance"]["stats"], points=[],
        point_files=[], missing=missing, server_files={"toy": [str(result)]})
    assert not missing, missing
    assert value["toy"] == {"words": ["served", "twice"], "said": "after the multiplicity step"}
    # an experiment the report cannot read is named, not skipped
    with pytest.raises(LadderError, match="'nope'.*serving_view.VIEWS"):
        serving_view.serving_section(plan=fixture["plan"], stats_cfg={}, points=[],
                                     point_files=[], missing=[], server_files={"nope": []})
    doc = {**fixture, "serving": {**(fixture.get("serving") or {}), "toy": value["toy"]}}
    bad = {**doc, "serving": {**doc["serving"], "toy": {"words": [1]}}}
    with pytest.raises(LadderError, match="toy"):
        render.validate(bad, "bad.json")
    src = tmp_path / "ladder.json"
    src.write_text(json.dumps(doc))
    out = render.render_all(src, tmp_path / "out", workdir=tmp_path)
    md, html = Path(out["md"]).read_text(), Path(out["html"]).read_text()
    assert "### Toy experiment\n\nserved, twice (after the multiplicity step)" in md
    assert '<h3 id="serving-toy">Toy experiment</h3><p>served, twice</p>' in html
    assert (tmp_path / "out" / "figures" / "serving_toy.png").is_file()
    assert "serving_toy" in html


class _Named(dict):
    """Snakemake's named lists as the adapter reads them: attributes, ``items()``, indexing."""

    def __getattr__(self, name):
        return self[name]


def test_the_adapter_passes_the_declared_inputs_by_name(tmp_path, monkeypatch):
    """scripts/serve.py imports the experiment's entry by the name its rule gives and hands it
    the job's files: the model, the paths, the thread count, the CPUs and each declared input."""
    seen = {}
    toy_module = types.ModuleType("ladder.measuring.toy_module")

    def run(rungs, block, settings, paths, threads, own_cpus=None, *, corpus):
        seen.update(rungs=rungs, settings=settings, paths=paths, threads=threads,
                    own_cpus=own_cpus, corpus=corpus)

    toy_module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ladder.measuring.toy_module", toy_module)
    log = tmp_path / "serve.log"
    fake = types.SimpleNamespace(
        scriptdir=str(ROOT / "scripts"), rule="serve", threads=2, log=[str(log)],
        params=_Named(measure="toy_module:run", rungs=["floor"], policy={}, settings={"toy": {}},
                      levers=[], budgeted=False),
        input=_Named(model="m.json", builds=["b.json"], corpus="corpus.txt"),
        output=_Named(json=str(tmp_path / "o.json"), raw=str(tmp_path / "o.raw")),
        wildcards=_Named(host="local", experiment="toy", model="m", threads="2"))
    runpy.run_path(str(ROOT / "scripts" / "serve.py"), init_globals={"snakemake": fake})
    assert seen["corpus"] == "corpus.txt" and seen["threads"] == 2 and seen["own_cpus"] == 2
    assert seen["paths"].model_meta == "m.json" and seen["paths"].out_json.endswith("o.json")


def test_the_adapter_passes_levers_and_the_budget_where_declared(tmp_path, monkeypatch):
    """An experiment whose block has lever settings gets them (``levers``), and one that
    shares the run's measuring budget (x-serving budgeted) gets the job's share of it."""
    seen = {}
    toy_module = types.ModuleType("ladder.measuring.toy_levers")

    def run(rungs, block, settings, paths, threads, own_cpus=None, *, levers, budget):
        seen.update(levers=levers, budget=budget)

    toy_module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ladder.measuring.toy_levers", toy_module)
    fake = types.SimpleNamespace(
        scriptdir=str(ROOT / "scripts"), rule="serve", threads=2, log=[str(tmp_path / "l")],
        params=_Named(measure="toy_levers:run", rungs=["floor"], policy={}, settings={},
                      levers=[{"name": "r+a"}], budgeted=True),
        input=_Named(model="m.json", builds=["b.json"]),
        output=_Named(json=str(tmp_path / "o.json"), raw=str(tmp_path / "o.raw")),
        resources=_Named(budget_s=600, budget_cells=4),
        wildcards=_Named(host="local", experiment="toy", model="m", threads="2"))
    runpy.run_path(str(ROOT / "scripts" / "serve.py"), init_globals={"snakemake": fake})
    assert seen["levers"] == [{"name": "r+a"}]
    assert (seen["budget"].host, seen["budget"].budget_s, seen["budget"].cells) == ("local", 600, 4)
