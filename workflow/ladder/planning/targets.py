"""Result paths of one rung, for Snakemake's --forcerun (single-rung reruns).

    ladder paths build RUNG [--host H ...] [--configfile F ...]
    ladder paths measure RUNG [--host H ...] [--configfile F ...]

``build`` prints the rung's build provenance on each host (a build shared by hosts with the same
CPU identity is printed once); forcing it rebuilds that binary and, through content addressing,
reruns only what used it. ``measure`` prints the rung's evidence, quality and dispatch results and
the host's bench cells (every cell measures all rungs interleaved: that is what the noise floor
is made of); forcing them re-measures without rebuilding. Each host's plan comes from the facts
its host_facts job recorded (results/hosts/<host>/host.json), so run the workflow once first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, MutableMapping, Sequence

import yaml

from ladder.core import paths
from ladder.planning.config import validate_config
from ladder.core.errors import LadderError
from ladder.core.hosts import check_facts, hosts_from_config
from ladder.core.io import read_json
from ladder.planning.plan import Plan
from ladder.core.machine import host_arch

WORKFLOW = Path(__file__).resolve().parent.parent.parent


def _merge(base: MutableMapping[str, Any], over: MutableMapping[str, Any]) -> None:
    """Snakemake's --configfile rule: nested mappings update, other values replace."""
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def load_config(configfiles: Sequence[str], overrides: Sequence[str] = ()) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for f in ["config/config.yaml", *configfiles]:
        try:
            _merge(config, yaml.safe_load(Path(f).read_text()) or {})
        except OSError as exc:
            raise LadderError(f"{f}: cannot read the config ({exc.strerror})") from exc
    for item in overrides:  # snakemake's --config KEY=VALUE (top-level keys)
        key, sep, value = item.partition("=")
        if not sep:
            raise LadderError(f"--config {item!r}: expected KEY=VALUE")
        config[key] = yaml.safe_load(value)
    validate_config(config, WORKFLOW / "schemas" / "config.schema.yaml")
    return config


def host_plans(config: dict[str, Any], names: Sequence[str]) -> dict[str, Plan]:
    hosts = {h.name: h for h in hosts_from_config(config, host_arch())}
    unknown = [n for n in names if n not in hosts]
    if unknown:
        raise LadderError(f"--host {', '.join(unknown)}: not in hosts ({', '.join(hosts)})")
    plans = {}
    for name in names or list(hosts):
        path = paths.result("host", host=name)
        if not Path(path).exists():
            raise LadderError(f"host {name}: {path} does not exist yet; run the workflow (or "
                              f"its host_facts job) for this host first")
        facts = read_json(path)
        check_facts(hosts[name], facts, path)
        plans[name] = Plan.from_config(config, hosts[name], facts)
    return plans


def rung_paths(kind: str, rung: str, plans: dict[str, Plan]) -> list[str]:
    out: list[str] = []
    for name, plan in plans.items():
        if rung not in plan.build_keys:
            raise LadderError(f"host {name}: rung {rung!r} is not in ladder {plan.ladder_name} "
                              f"({', '.join(plan.build_keys)})")
        if rung in plan.not_applicable:
            print(f"ladder paths: host {name}: {rung} is not applicable "
                  f"({plan.not_applicable[rung]}); skipped", file=sys.stderr)
            continue
        if kind == "build":
            out.append(f"{Plan.builds_dir_of(plan.config)}/{plan.build_keys[rung]}/"
                       "provenance.json")
            continue
        quants = plan.model_quants()
        out += [paths.result("evidence", host=name, model=m, quant=q, rung=rung)
                for m, q in quants]
        if rung in plan.quality_rungs():
            out += [paths.result("quality", host=name, model=m, quant=q, rung=rung)
                    for m, q in quants]
        if rung in plan.dispatch_rungs():
            out += [paths.result("dispatch", host=name, model=m, rung=rung)
                    for m in sorted({m for m, _ in quants})]
        out += [paths.result("bench", host=name, model=m, quant=q, workload=w, threads=t)
                for m, q, w, t in plan.cells()]
        out += [paths.result("reconcile", host=name, model=m, quant=q, workload=w)
                for m, q, w in plan.reconcile_cells()]
    return list(dict.fromkeys(out))
