"""The report's sections are registered once (issue 32, item 4): each entry's parts exist and are
wired, and a made-up section goes through the report, the schema and both templates without
touching any other file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ladder.reporting import figures, render
from ladder.reporting import sections
from ladder.reporting.report import build_doc
from ladder.reporting.sections import SECTIONS, SLOTS, Section

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "report" / "ladder.json"
COMMON = (ROOT / "workflow" / "rules" / "common.smk").read_text()


@pytest.mark.parametrize("section", SECTIONS, ids=[s.key for s in SECTIONS])
def test_every_section_has_its_parts(section):
    assert section.slot in SLOTS
    assert callable(section.builder())
    assert section.figures is None or callable(section.drawer())
    for kind, path in section.parts().items():
        assert path.is_file(), (section.key, kind)
    # its input function in common.smk returns exactly the inputs the entry names
    body = re.search(rf"\ndef {section.key}_files\(wildcards\):\n(.*?)\n\n\n", COMMON + "\n\n\n",
                     re.S)
    assert body, f"common.smk has no {section.key}_files(wildcards)"
    named = set(re.findall(r'^\s{8}"(\w+)":', body.group(1), re.M))
    if section.subkeys:  # one input per part of its own, named f"<key>_{part}" in a loop
        assert re.search(rf'f"{section.key}_{{key}}"', body.group(1)), section.key
        named |= {f"{section.key}_{k}" for k in section.subkeys}
    assert named == set(section.inputs), (section.key, named)
    for key, parts in section.subparts().items():
        for kind, path in parts.items():
            assert path.is_file(), (section.key, key, kind)


def test_the_wiring_iterates_the_registry():
    """No section is named by hand in the rule inputs, the adapter, the writer or the main
    templates: they iterate SECTIONS."""
    adapter = (ROOT / "scripts" / "report.py").read_text()
    report_inputs = re.search(r"\ndef report_inputs\(wildcards\):\n(.*?)\n\n\n", COMMON, re.S)
    assert report_inputs
    main_templates = [(ROOT / "workflow" / "templates" / f"ladder.{e}.j2").read_text()
                      for e in ("md", "html")]
    for s in SECTIONS:
        for text in (adapter, report_inputs.group(1), *main_templates):
            for name in (s.key, *s.inputs):
                assert not re.search(rf"\b{name}\b", text), (s.key, name)


def toy_build(ctx):
    files = ctx.files["toy_in"]
    if not files:
        return None
    return {"words": [json.loads(Path(f).read_text())["word"] for f in files]}


def toy_figures(doc, out_dir):
    """The toy section's own figure, drawn with the shared plotting helpers only."""
    from ladder.reporting.plotting import plt, save

    if not doc.get("toy"):
        return None
    fig, ax = plt.subplots()
    ax.bar(range(len(doc["toy"]["words"])), [len(w) for w in doc["toy"]["words"]])
    return {"id": "toy", "title": "Toy", "file": save(fig, Path(out_dir), "toy"), "caption": "c"}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A made-up section: its builder (this module), its two template parts and its schema
    fragment, in copies of the template and schema dirs."""
    templates = tmp_path / "templates"
    shutil.copytree(render.TEMPLATES, templates)
    (templates / "sections" / "toy.md.j2").write_text(
        '{% if doc.get("toy") %}\n## Toy section\n\n{{ doc.toy.words | join(", ") }}\n\n{% endif %}\n')
    (templates / "sections" / "toy.html.j2").write_text(
        '{% if doc.get("toy") %}<h2 id="toy">Toy section</h2><p>{{ doc.toy.words | join(", ") }}</p>\n'
        '{% endif %}\n')
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    shutil.copytree(sections.SCHEMAS, schemas, dirs_exist_ok=True)
    (schemas / "toy.schema.yaml").write_text(
        "type: [object, 'null']\nrequired: [words]\n"
        "properties: {words: {type: array, items: {type: string}}}\n")
    entry = Section("toy", ("toy_in",), build=f"{__name__}:toy_build", slot="after_ledger",
                    figures=f"{__name__}:toy_figures")
    monkeypatch.setattr(sections, "SECTIONS", (*SECTIONS, entry))
    monkeypatch.setattr(figures, "SECTIONS", (*SECTIONS, entry))
    monkeypatch.setattr(render, "SECTIONS", (*SECTIONS, entry))
    monkeypatch.setattr(sections, "TEMPLATES", templates / "sections")
    monkeypatch.setattr(sections, "SCHEMAS", schemas)
    monkeypatch.setattr(render, "TEMPLATES", templates)
    return entry


def test_a_new_section_needs_only_its_own_parts(toy, tmp_path):
    fixture = json.loads(FIXTURE.read_text())
    word = tmp_path / "word.json"
    word.write_text(json.dumps({"word": "registered"}))
    doc = build_doc(plan=fixture["plan"], stats_cfg=fixture["provenance"]["stats"],
                    inputs={"toy_in": [str(word)], "hotspots": [], "kernel_tests": []})
    assert doc["toy"] == {"words": ["registered"]}
    assert doc["hotspots"] is None and doc["serving"] is None  # the others: off, no inputs
    # the schema checks the section's value through its fragment
    bad = {**fixture, "toy": {"words": [1]}}
    with pytest.raises(Exception, match="toy"):
        render.validate(bad, "bad.json")
    # both templates include it at its slot: after the dispatch ledger, before the quality
    out = tmp_path / "out"
    src = tmp_path / "ladder.json"
    src.write_text(json.dumps({**fixture, "toy": doc["toy"]}))
    paths = render.render_all(src, out, workdir=tmp_path)
    md, html = Path(paths["md"]).read_text(), Path(paths["html"]).read_text()
    assert md.index("## Dispatch ledger") < md.index("## Toy section\n\nregistered") < md.index(
        "## Quality drift")
    assert html.index('id="dispatch"') < html.index('<h2 id="toy">') < html.index('id="evidence"')
    # its figure is its own module's, drawn by figures.draw_all (no edit to figures.py)
    drawn = figures.draw_all({**fixture, "toy": doc["toy"]}, tmp_path / "figs")
    assert drawn["toy"]["file"] == "toy.png" and (tmp_path / "figs" / "toy.png").is_file()
    assert {"id": "toy", "title": "Toy", "file": "toy.png", "caption": "c"} in \
        figures.section_figures(drawn)


def test_an_input_no_one_reads_is_named(tmp_path):
    fixture = json.loads(FIXTURE.read_text())
    with pytest.raises(Exception, match=r"report inputs \['hotspot'\]"):
        build_doc(plan=fixture["plan"], stats_cfg=fixture["provenance"]["stats"],
                  inputs={"hotspot": []})
