"""The report's sections, registered once (issue 32, item 4).

The core of a host's report is the ladder: its rungs, bench cells, evidence, quality drift,
dispatch ledger and bandwidth, from which every step's verdict and credit are built. A section
adds a block of its own beside that core. Each is named once, here, and then:

- common.smk's ``report_inputs`` asks the section's input function, ``<key>_files(wildcards)``
  in common.smk, for the host_report rule's named inputs it lists in ``inputs``;
- the adapter (scripts/report.py) hands every named input over as it is, and
  ``report.build_doc`` calls the section's ``build`` ("module:function", imported when a
  report is built; building the plan never imports it) with a :class:`SectionContext`; the value goes
  under ``key`` in the report JSON (None: the section is off);
- ``render.validate`` checks that value against ``workflow/schemas/sections/<key>.schema.yaml``
  (merged into report.schema.yaml's properties), and the report templates include
  ``workflow/templates/sections/<key>.md.j2`` and ``.html.j2`` at the section's ``slot``;
- ``figures.draw_all`` calls ``figures`` ("module:function", or None) for its PNGs, kept under
  ``key`` in the figures the templates see.

So a new section is its own module (the builder, and its figures), its two template parts, its
schema fragment, its input function, and one entry of ``SECTIONS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ladder.analysis.context import SectionContext  # re-exported: what a builder gets
from ladder.planning.serving_experiments import server_experiments

WORKFLOW = Path(__file__).resolve().parents[2]
TEMPLATES = WORKFLOW / "templates" / "sections"
SCHEMAS = WORKFLOW / "schemas" / "sections"
# where the report templates include sections: after the thread reconciliation ("each rung at
# its own best thread count"), and after the dispatch ledger
SLOTS = ("after_best_threads", "after_ledger")


@dataclass(frozen=True)
class Section:
    key: str
    inputs: tuple[str, ...]
    build: str
    slot: str
    figures: str | None = None
    # parts of its own under sections/<key>/ (each a key of its value: the serving experiments
    # that run their own tool), included by its templates and merged into its schema
    subkeys: tuple[str, ...] = ()

    def builder(self) -> Callable[[SectionContext], Any]:
        return _resolve(self.build)

    def drawer(self) -> Callable[[Mapping[str, Any], Path], Any] | None:
        return _resolve(self.figures) if self.figures else None

    def parts(self) -> dict[str, Path]:
        return _parts(TEMPLATES, SCHEMAS, self.key)

    def subparts(self) -> dict[str, dict[str, Path]]:
        return {k: _parts(TEMPLATES / self.key, SCHEMAS / self.key, k) for k in self.subkeys}


def _parts(templates: Path, schemas: Path, key: str) -> dict[str, Path]:
    return {"md": templates / f"{key}.md.j2", "html": templates / f"{key}.html.j2",
            "schema": schemas / f"{key}.schema.yaml"}


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


# the serving experiments that run their own tool: an input and a part of their own each
_SERVERS = tuple(e.key for e in server_experiments())
SECTIONS: tuple[Section, ...] = (
    Section("reconcile", ("reconcile", "reconcile_ledger"),
            build="ladder.analysis.reconcile:section", slot="after_best_threads"),
    Section("serving", ("serving_points", *(f"serving_{key}" for key in _SERVERS)),
            build="ladder.analysis.serving_view:section", slot="after_best_threads",
            figures="ladder.reporting.serving_figures:serving_figures", subkeys=_SERVERS),
    Section("hotspots", ("hotspots",), build="ladder.analysis.profile_view:hotspots",
            slot="after_ledger", figures="ladder.reporting.profile_figures:hotspot_bars"),
    Section("kernel_tests", ("kernel_tests", "vendor_tests"),
            build="ladder.analysis.profile_view:kernel_tests",
            slot="after_ledger"),
)

