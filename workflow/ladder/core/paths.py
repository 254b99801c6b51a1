"""Where every per-host result lives: one template per kind of result, nowhere else.

Rules take their outputs from here (``pattern``: Snakemake wildcards are Python format fields),
input functions, ``ladder paths`` and the fleet report build concrete paths (``result``), and a
path can be read back (``match``). Results also carry their own identity (experiment, point,
threads, rung) in their JSON, so no consumer parses a path to learn what a file holds.
"""

from __future__ import annotations

import re
from typing import Any

HOST = "results/hosts/{host}"
RESULTS: dict[str, str] = {
    "host": f"{HOST}/host.json",
    "bandwidth": f"{HOST}/bandwidth.json",
    "rung_card": f"{HOST}/rungs/{{rung}}.json",
    "evidence": f"{HOST}/evidence/{{model}}/{{quant}}/{{rung}}.json",
    "quality": f"{HOST}/quality/{{model}}/{{quant}}/{{rung}}.json",
    "bench": f"{HOST}/bench/{{model}}/{{quant}}/{{workload}}/t{{threads}}.json",
    "reconcile": f"{HOST}/reconcile/{{model}}/{{quant}}/{{workload}}.json",
    "dispatch": f"{HOST}/dispatch/{{model}}/{{rung}}.json",
    "ledger": f"{HOST}/dispatch/ledger.json",
    "hotspots": f"{HOST}/hotspots/{{model}}/{{quant}}/{{rung}}.json",
    "kernel_tests": f"{HOST}/kernels/{{rung}}.json",
    "vendor_tests": f"{HOST}/kernels/{{rung}}.vendor.json",
    "gate": f"{HOST}/dispatch/gate.ok",
    "serving_point": f"{HOST}/serving/{{experiment}}/{{model}}/{{point}}/t{{threads}}.json",
    # an experiment that runs its own tool (serving_experiments.server_experiments)
    "serving_run": f"{HOST}/serving/{{experiment}}/{{model}}/t{{threads}}.json",
    "report_json": f"{HOST}/report/ladder.json",
    "report": f"{HOST}/report/ladder.{{ext}}",
    "figures": f"{HOST}/report/figures",
    "quality_logits": f"{HOST}/quality/logits",
    "fleet": "results/report/fleet.{ext}",
}


def pattern(kind: str) -> str:
    """The template with its wildcards, for a rule's output."""
    return RESULTS[kind]


def beside(kind: str, suffix: str) -> str:
    """A sibling of a result (its raw folder, its log): the template with another suffix."""
    return RESULTS[kind].rsplit(".", 1)[0] + suffix


def result(kind: str, **fields: Any) -> str:
    """One concrete path."""
    try:
        return RESULTS[kind].format(**fields)
    except KeyError as exc:
        raise KeyError(f"paths.result({kind!r}): missing field {exc}") from None


def _regex(kind: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", RESULTS[kind])
    rx = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+?)"
                 for i, p in enumerate(parts))
    return re.compile(rf"(?:^|.*/){rx}$")


def match(kind: str, path: str) -> dict[str, str] | None:
    """The fields of a path of this kind (None if it is not one)."""
    m = _regex(kind).match(str(path))
    return m.groupdict() if m else None
