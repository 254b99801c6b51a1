"""A config overlay from a few plain inputs (what a CI form or a shell offers).

    ladder overlay [--base config/ci.yaml] [--quants Q4_0,Q8_0] [--workloads pp64,tg32]
                   [--rounds 5] > inputs.yaml

Workloads are named ``pp<N>`` (prefill N tokens) or ``tg<N>`` (decode N tokens); the base
config's other workloads are switched off (set to null), since Snakemake merges overlays key by
key. The result is a YAML overlay for ``./ladder run --configfile``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from ladder.core.errors import LadderError

WORKLOAD = re.compile(r"^(pp|tg)([1-9][0-9]*)$")


def workload_spec(name: str) -> dict[str, int]:
    m = WORKLOAD.match(name)
    if not m:
        raise LadderError(f"--workloads: {name!r} is not ppN (prefill N tokens) or tgN "
                          "(decode N tokens)")
    n = int(m.group(2))
    return {"n_prompt": n, "n_gen": 0} if m.group(1) == "pp" else {"n_prompt": 0, "n_gen": n}


def overlay(base: Mapping[str, Any], quants: Sequence[str] = (), workloads: Sequence[str] = (),
            rounds: int | None = None) -> dict[str, Any]:
    """Pure: the base config (to know which workloads to switch off) and the inputs."""
    measure: dict[str, Any] = {}
    if quants:
        measure["quants"] = [q.strip().upper() for q in quants if q.strip()]
    if workloads:
        wanted = {w.strip(): workload_spec(w.strip()) for w in workloads if w.strip()}
        measure["workloads"] = {**{k: None for k in (base.get("measure") or {}).get(
            "workloads") or {} if k not in wanted}, **wanted}
    if rounds is not None:
        if rounds < 3:
            raise LadderError(f"--rounds: {rounds} is too few to judge anything (at least 3)")
        measure["rounds"] = rounds  # fixed: the rounds asked for, not chosen from the noise
        measure["rounds_from_noise"] = {"enabled": False}
    return {"measure": measure} if measure else {}
