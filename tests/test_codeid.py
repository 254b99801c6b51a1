"""A rule's code identity is derived from its script's imports (issue 32)."""

from __future__ import annotations

import ast

import re
import shutil
from pathlib import Path

import pytest

from ladder.core import codeid
from ladder.planning.serving_experiments import server_experiments

ROOT = Path(__file__).resolve().parents[1]


def test_the_report_reaches_every_module_it_imports():
    # the hand-kept list had drifted: host_report's omitted serving and cost
    mods = codeid.code_modules("report")
    assert {"report", "stats", "serving_view", "load_view", "cost", "quality",
            "dispatch"} <= set(mods)
    # a registered section's builder, named "ladder.<module>:<function>", counts too
    assert {"sections", "profile_view"} <= set(mods)
    # a module run as a program by file name (the lldb driver) counts too
    assert "lldb_driver" in codeid.code_modules("dispatch")


def test_every_script_rule_names_its_own_script():
    """A rule's code param is code("<its own script>"), so its identity is derived from what it
    runs (the content-addressed fetch and build rules are keyed by what they fetch or build)."""
    seen = 0
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for rule in re.split(r"\n(?=rule )", smk.read_text()):
            script = re.search(r'script:\s*\n\s*"\.\./\.\./scripts/([a-z_]+)\.py"', rule)
            if not script:
                continue
            if "code=" not in rule:
                continue
            seen += 1
            assert re.search(rf'code=code\("{script.group(1)}"[,)]', rule), (smk.name,
                                                                           rule.split(":")[0])
    assert seen >= 15


@pytest.fixture
def tree(tmp_path, monkeypatch):
    pkg, scripts = tmp_path / "ladder", tmp_path / "scripts"
    shutil.copytree(codeid.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(codeid.SCRIPTS_DIR, scripts)
    # the schemas the package reads on import (the config schema declares the serving
    # experiments), where they lie relative to it
    shutil.copytree(codeid.PACKAGE_DIR.parent / "schemas", tmp_path / "schemas")
    monkeypatch.setattr(codeid, "PACKAGE_DIR", pkg)
    monkeypatch.setattr(codeid, "SCRIPTS_DIR", scripts)
    codeid._tree.cache_clear()
    codeid._index.cache_clear()
    yield pkg
    codeid._tree.cache_clear()
    codeid._index.cache_clear()


def test_a_comment_reruns_nothing_and_a_logic_change_reruns_its_rules(tree):
    before = {s: codeid.code_hash(s) for s in ("report", "bench", "render")}
    cost = tree / "core" / "cost.py"
    cost.write_text("# a comment\n" + cost.read_text().replace('"""', '"""Edited. ', 1))
    codeid._tree.cache_clear()
    assert {s: codeid.code_hash(s) for s in before} == before
    cost.write_text(cost.read_text() + "\nSOMETHING = 1\n")
    codeid._tree.cache_clear()
    after = {s: codeid.code_hash(s) for s in before}
    assert after["report"] != before["report"]  # the report imports cost
    assert after["bench"] == before["bench"]  # a measurement that never reaches it


def test_a_type_only_edit_reruns_nothing_and_a_field_is_code(tree):
    """Issue 60, item 2: in a module whose annotations are never evaluated, a function's
    annotations, a variable's and ``cast`` are the type checker's alone, so editing them
    re-measures nothing (mypy no longer skips modules to spare their results); a class body's
    annotations are fields (a dataclass's), so changing one is code."""
    before = {s: codeid.code_hash(s) for s in ("bench", "dispatch", "report")}
    progress = tree / "core" / "progress.py"
    text = progress.read_text()
    sig = "def step(label: str, done: int, total: int, *details: str) -> None:"
    body = 'log.info(" · ".join([f"{label} {done}/{total}", *details]))'
    assert sig in text and body in text
    progress.write_text(text.replace(sig, "def step(label: Any, done: int, total: int, "
                                          "*details: Any) -> Any:").replace(
        body, 'shown: str\n    log.info(" · ".join([f"{label} {done}/{total}", '
              '*cast(list[str], details)]))'))
    codeid._tree.cache_clear()
    assert {s: codeid.code_hash(s) for s in before} == before
    # an annotated assignment is an assignment: a new variable is new code
    progress.write_text(text.replace(body, "pace: float = 6\n    " + body))
    codeid._tree.cache_clear()
    assert codeid.code_hash("bench") != before["bench"]
    progress.write_text(text)
    kernels = tree / "core" / "kernels.py"
    k = kernels.read_text()
    kernels.write_text(k.replace("    dispatch: str | None = None",
                                 "    dispatch: ClassVar[str | None] = None", 1))
    codeid._tree.cache_clear()
    assert codeid.code_hash("dispatch") != before["dispatch"]  # no longer a dataclass field


def test_annotations_are_code_where_they_are_evaluated():
    """Without ``from __future__ import annotations`` a def's annotations are evaluated when it
    runs (a missing name raises), so there they stay in the hash."""
    plain = "def f(x: int) -> int:\n    return x\n"
    other = "def f(x: str) -> int:\n    return x\n"
    assert codeid._digest("a.py", 0, plain) != codeid._digest("a.py", 0, other)
    future = "from __future__ import annotations\n"
    assert codeid._digest("a.py", 0, future + plain) == codeid._digest("a.py", 0, future + other)


# the measuring rules' code: (adapter, the entry its rule names): the serve rule runs each
# serving experiment's own module (its x-serving)
MEASURING = (("bench",), ("serve_bench",),
             *(("serve", e.module) for e in server_experiments()))
ANALYSIS = {"stats", "serving_view", "load_view", "report", "figures", "render", "overview",
            "fleet", "compare", "cost"}


def test_a_measurement_never_reaches_the_analysis():
    """What is measured is keyed by what measures it: the binary, model, workload, threads, CPU
    set and the protocol (``ladder.planning.protocol``, its VERSION included); the statistics and the
    report are analysis, re-run from the kept samples."""
    for script in MEASURING:
        mods = set(codeid.code_modules(*script))
        assert "protocol" in mods, script
        assert not mods & ANALYSIS, (script, sorted(mods & ANALYSIS))
    assert "protocol" in codeid.code_modules("report")  # the analysis reads the same protocol


PREPARING = {"build", "recipes", "source", "vendor", "emulation", "plan", "config"}


def test_a_measurement_never_reaches_the_build_code():
    """A rung's build record is the measuring jobs' input, its code is not: an edit to how
    builds, sources (patches) or the emulated lane are made rebuilds what changed and
    re-measures nothing else (the bench rule reached 15 modules through one 3-line function,
    build.unbuilt_status, until 2026-12-05). The evidence rule reads the launcher of the
    emulated lane (its crash note), nothing else of it."""
    for script in (*MEASURING, ("evidence",), ("quality",)):
        mods = set(codeid.code_modules(*script))
        allowed = {"emulation"} if script == ("evidence",) else set()
        assert not mods & (PREPARING - allowed), (script, sorted(mods & PREPARING))


def test_a_changed_statistic_reruns_the_analysis_not_the_measurement(tree):
    before = {s: codeid.code_hash(*s) for s in (("report",), *MEASURING)}
    stats = tree / "analysis" / "stats.py"
    stats.write_text(stats.read_text().replace("MAD_Z = 3.5", "MAD_Z = 3.0"))
    codeid._tree.cache_clear()
    after = {s: codeid.code_hash(*s) for s in before}
    assert after[("report",)] != before[("report",)]
    assert all(after[s] == before[s] for s in MEASURING)
    proto = tree / "planning" / "protocol.py"  # a new protocol version re-measures every cell
    text = proto.read_text()
    version = int(re.search(r"^VERSION = (\d+)", text, re.M).group(1))
    proto.write_text(text.replace(f"VERSION = {version}", f"VERSION = {version + 1}"))
    codeid._tree.cache_clear()
    bumped = {s: codeid.code_hash(*s) for s in before}
    assert all(bumped[s] != after[s] for s in MEASURING)


def test_building_the_plan_imports_no_measurement_code():
    """Issue 32, item 4: ``Plan`` reaches the settings it plans from (``stages`` for hotspots
    and kernel tests, ``serving_experiments`` for serving), never the code that measures or analyses."""
    reach = set(codeid.module_reach("plan"))
    measuring = {"bench", "harness", "hotspots", "kernel_tests", "prefix_cache", "concurrency",
                 "load", "load_client", "llama_server", "dispatch", "debugger", "lldb_driver", "uprobes", "counting", "quality",
                 "evidence", "bandwidth", "build", "run"}
    assert not reach & (measuring | ANALYSIS), sorted(reach & (measuring | ANALYSIS))
    assert {"stages", "serving_experiments", "protocol"} <= reach


def _move_into_subpackages(pkg: Path, scripts: Path, n_layers: int = 5) -> dict[str, str]:
    """A pure move, as a person would make it: every module (wherever it lives) into one of
    ``n_layers`` new subpackages, each package import and ``"ladder.<...>.<module>:<fn>"``
    reference rewritten to the new place, and each ``Path(__file__)`` chain that leaves the
    module's folder counted again from its new depth. Returns leaf -> sub."""
    import ast

    old = {p.stem: p for p in pkg.rglob("*.py")
           if p.name != "__init__.py" and "__pycache__" not in p.parts}
    leaves = sorted(old)
    where = {leaf: f"layer{i % n_layers}" for i, leaf in enumerate(leaves)}
    depth_before = {leaf: len(old[leaf].relative_to(pkg).parts) - 1 for leaf in leaves}
    for sub in set(where.values()):
        (pkg / sub).mkdir()
        (pkg / sub / "__init__.py").write_text("")
    for leaf, sub in where.items():
        old[leaf].rename(pkg / sub / f"{leaf}.py")

    def rewrite(path: Path, climb: int) -> None:
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        edits = []
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "ladder"):
                continue
            indent = lines[node.lineno - 1][:node.col_offset]
            parts = node.module.split(".")
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "")
                              for a in node.names)
            if parts[-1] in where:  # from ladder.<...>.x import f
                new = [f"{indent}from ladder.{where[parts[-1]]}.{parts[-1]} import {names}\n"]
            else:  # from ladder[.<sub>] import a, b: each module from its subpackage
                new = [f"{indent}from ladder.{where[a.name]} import {a.name}"
                       f"{' as ' + a.asname if a.asname else ''}\n" for a in node.names]
            edits.append((node.lineno, node.end_lineno, new))
        for start, end, new in sorted(edits, reverse=True):
            lines[start - 1:end] = new
        text = "".join(lines)
        text = re.sub(r'"ladder\.(?:\w+\.)*(\w+):(\w+)"',
                      lambda m: f'"ladder.{where[m.group(1)]}.{m.group(1)}:{m.group(2)}"', text)
        if climb:  # a chain above the module's own folder climbs the depth it gained
            text = re.sub(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]",
                          lambda m: f"Path(__file__).resolve().parents[{int(m.group(1)) + climb}]",
                          text)
            text = re.sub(r"Path\(__file__\)\.resolve\(\)((?:\.parent(?!s))+)",
                          lambda m: f"Path(__file__).resolve(){m.group(1)}"
                                    + ".parent" * climb, text)
        path.write_text(text)

    for leaf, sub in where.items():
        rewrite(pkg / sub / f"{leaf}.py", 1 - depth_before[leaf])
    for path in scripts.glob("*.py"):
        rewrite(path, 0)
    return where


def test_moving_every_module_into_subpackages_keeps_every_rule_hash(tree):
    # issue 44, item 1: code identity knows a module by its name and its logic, not its folder
    scripts = codeid.SCRIPTS_DIR
    before = {p.stem: codeid.code_hash(p.stem) for p in sorted(scripts.glob("*.py"))}
    reach = {s: codeid.code_modules(s) for s in before}
    where = _move_into_subpackages(tree, scripts)
    codeid._tree.cache_clear()
    codeid._index.cache_clear()
    assert [p.name for p in tree.glob("*.py")] == ["__init__.py"]
    assert (tree / where["bench"] / "bench.py").is_file()
    assert "from ladder.layer" in (tree / where["report"] / "report.py").read_text()
    after = {s: codeid.code_hash(s) for s in before}
    assert {s: codeid.code_modules(s) for s in before} == reach
    assert after == before
    # and the moved package really imports: the rewritten imports name real modules
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-c", f"import ladder.{where['report']}.report"],
                         cwd=tree.parent, capture_output=True, text=True,
                         env={"PYTHONPATH": str(tree.parent), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]


def test_the_package_init_is_no_module_of_any_rule():
    # debugger.py names "__init__.py" (lldb's package); it is not a module of this package
    for script in ("dispatch", "ledger", "report", "rung_card", "dispatch_gate"):
        assert "__init__" not in codeid.code_modules(script)


LAYERS = ("core", "preparing", "planning", "measuring", "analysis", "reporting", "commands")

def test_an_import_for_the_type_checker_alone_is_no_part_of_a_rules_code():
    """The views annotate with the report's SectionContext under ``if TYPE_CHECKING:``: an
    import that never runs reaches no module."""
    import ast

    tree = ast.parse("from typing import TYPE_CHECKING\nimport typing\n"
                     "if TYPE_CHECKING:\n    from ladder.reporting.sections import X\n"
                     "if typing.TYPE_CHECKING:\n    from ladder import figures\n"
                     "else:\n    from ladder import stats\n")
    assert codeid._imports_in(tree) == frozenset({"stats"})
    assert "sections" not in codeid.direct_imports(
        codeid.PACKAGE_DIR / "analysis" / "serving_view.py")


def test_a_layer_imports_only_its_own_and_the_layers_before_it():
    """Issue 44, item 2: the package's layers are its subpackages, in the pipeline's order; a
    module may import from its own layer and the ones before it (measuring never reaches
    analysis or reporting)."""
    layer_of = {p.stem: p.parent.name for p in codeid.PACKAGE_DIR.rglob("*.py")
                if p.name != "__init__.py" and "__pycache__" not in p.parts}
    assert set(layer_of.values()) == set(LAYERS), sorted(set(layer_of.values()))
    against = []
    for mod, layer in sorted(layer_of.items()):
        for dep in codeid.direct_imports(codeid.PACKAGE_DIR / layer / f"{mod}.py"):
            if LAYERS.index(layer_of[dep]) > LAYERS.index(layer):
                against.append(f"{layer}/{mod} -> {layer_of[dep]}/{dep}")
    assert not against, against
    for mod in (m for m, layer in layer_of.items() if layer == "measuring"):
        reach = {layer_of[m] for m in codeid.module_reach(mod)}
        assert not reach & {"analysis", "reporting"}, (mod, reach)
    # an import for the type checker alone (no part of a rule's code) keeps the layers too:
    # issue 60 (analysis -> reporting.sections for SectionContext hid there)
    for mod, layer in sorted(layer_of.items()):
        tree = ast.parse((codeid.PACKAGE_DIR / layer / f"{mod}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ladder"):
                parts = node.module.split(".")
                deps = parts[2:3] if len(parts) > 2 else [a.name for a in node.names]
                against += [f"{layer}/{mod} -> {layer_of[d]}/{d} (any import)" for d in deps
                            if d in layer_of and LAYERS.index(layer_of[d]) > LAYERS.index(layer)]
    assert not against, against


def test_the_harness_and_the_bench_are_no_part_of_the_other_measurements():
    """Issue 44: one harness for the round loops must not tie every measurement to it. The
    dispatch ledger, evidence, kernel tests and hotspots never reach the harness or the bench
    cell (the hotspots take llama-bench's command line from ``llama_bench``), and what only a
    server needs (``watch``: a server's share of the machine) stays out of ``run``, which they
    all reach: a change to how bench cells are measured re-runs none of them."""
    for script in ("dispatch", "ledger", "evidence", "kernel_tests", "vendor_tests", "hotspots"):
        reach = set(codeid.code_modules(script))
        assert not reach & {"harness", "bench", "watch", "records"}, (script, sorted(reach))
