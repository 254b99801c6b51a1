"""Config checks: the schema (one line naming the key at fault, then Snakemake's validator
fills defaults), and the start-up checks that need no host facts (ladders, quants, workloads,
tools, prices, the emulated lane)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping, MutableMapping

import jsonschema
from snakemake.utils import validate

from ladder.preparing import emulation
from ladder.preparing.build import missing_tools
from ladder.core.cost import host_price
from ladder.core.errors import LadderError
from ladder.core.hosts import Host
from ladder.core.kernels import load_families
from ladder.preparing.model import check_models
from ladder.planning.protocol import check_repetitions, check_rounds_rule, threshold_for
from ladder.planning.schema import load_schema
from ladder.planning.scoring import check_settings
from ladder.planning.serving_experiments import server_experiments
from ladder.preparing.recipes import Rung, quantizer_recipe, rungs_from_config


def first_error(config: Any, schema: dict[str, Any]) -> str | None:
    validator = jsonschema.Draft202012Validator(schema)
    err = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if err is None:
        return None
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return f"config{path}: {err.message}"


def drop_null_entries(config: Any, schema: Mapping[str, Any]) -> bool:
    """Remove the null entries of every map whose schema lets an entry be null ("null drops
    one", e.g. a default workload in an overlay): Snakemake's default-filling validator would
    otherwise try to fill an entry's defaults into None (an AttributeError at start-up).
    True if any was removed."""
    if not isinstance(config, MutableMapping):
        return False
    extra = schema.get("additionalProperties")
    props = schema.get("properties") or {}
    dropped = False
    if isinstance(extra, Mapping) and "null" in (extra.get("type") or []):
        for key in [k for k, v in config.items() if v is None and k not in props]:
            del config[key]
            dropped = True
    for key, value in config.items():
        sub = props.get(key, extra if isinstance(extra, Mapping) else None)
        if isinstance(sub, Mapping):
            dropped = drop_null_entries(value, sub) or dropped
    return dropped


def validate_config(config: MutableMapping[str, Any], schema_path: str | Path) -> None:
    schema = load_schema(schema_path)
    problem = first_error(config, schema)
    if not problem and drop_null_entries(config, schema):
        problem = first_error(config, schema)  # e.g. every entry of a map dropped
    if problem:
        raise LadderError(problem)
    validate(config, str(schema_path))  # fills in the schema's defaults


def schema_defaults(schema_path: str | Path, section: str) -> dict[str, Any]:
    """A config section as the schema fills it in when the config gives none of it (its
    defaults, nested objects included): the settings a library caller or a test starts from,
    so that no default lives anywhere but the schema."""
    schema = load_schema(schema_path)

    def filled(sub: Mapping[str, Any], given: Any) -> Any:
        if not isinstance(given, dict) or not sub.get("properties"):
            return given
        out = dict(given)
        for key, prop in sub["properties"].items():
            if key not in out and "default" in prop:
                out[key] = copy.deepcopy(prop["default"])
            if key in out:
                out[key] = filled(prop, out[key])
        return out

    prop = schema["properties"][section]
    return dict(filled(prop, copy.deepcopy(prop.get("default", {}))))


def check_phases(workloads: Mapping[str, Any], key: str) -> None:
    """Every dispatch workload is one phase (prefill or decode)."""
    for name, spec in (workloads or {}).items():
        if spec and bool(spec.get("n_prompt")) == bool(spec.get("n_gen")):
            raise LadderError(f"{key}.{name}: give n_prompt (a prefill phase) or "
                              f"n_gen (a decode phase), not both or neither: {dict(spec)}")


def check_quants(config: Mapping[str, Any], quants: list[str] | None, key: str) -> None:
    """Every quant a run asks for is one a model produces."""
    known = {q.upper() for m in config["models"].values()
             for q in [m["quant"], *m.get("derive", [])]}
    unknown = [q for q in quants or [] if q.upper() not in known]
    if unknown:
        raise LadderError(f"{key}: {unknown} not produced by any model (known: {sorted(known)})")


def check_dispatch(settings: Mapping[str, Any], rungs: list[Rung], arch: str,
                   ladder: str | None = None) -> None:
    """Every workload is one phase; every rung's family exists in the families file."""
    check_phases(settings.get("workloads") or {}, "dispatch.workloads")
    fset = load_families(arch, settings.get("families_file"))
    for r in rungs:
        if r.family and r.family not in fset.families:
            raise LadderError(f"ladders.{ladder or arch}.rungs[{r.name}].family: {r.family!r} is not a "
                              f"kernel family for {arch} in {fset.source} "
                              f"(known: {', '.join(fset.families)})")


def start_up(config: MutableMapping[str, Any], schema_path: str | Path) -> list[Host]:
    """Everything the workflow checks before planning any job, in order: the schema (filling in
    its defaults), the hosts, then check_config. The hosts, as the config lists them."""
    from ladder.core.hosts import hosts_from_config
    from ladder.core.machine import host_arch

    validate_config(config, schema_path)
    hosts = list(hosts_from_config(config, host_arch()))
    check_config(config, hosts)
    return hosts


def check_config(config: Mapping[str, Any], hosts: list[Host]) -> None:
    """Start-up checks that need no host facts: every host's ladder, quants, quality, prices."""
    from ladder.planning.plan import ladder_of

    # a ladder's families are its hosts' arch's (a ladder may have any name: "aa", "mine")
    known: dict[str, list[str]] = {}
    for name, arch in sorted({(ladder_of(config, h, h.arch), h.arch) for h in hosts}):
        rungs = rungs_from_config(config, name)
        known[name] = [r.name for r in rungs]
        quantizer_recipe(config, name)
        dispatch = config.get("dispatch") or {}
        if dispatch.get("enabled"):
            check_dispatch(dispatch, rungs, arch, name)
    build_cfg = config["build"]
    missing = missing_tools(build_cfg.get("generator", "Ninja"), build_cfg.get("ccache", True))
    if missing:
        raise LadderError(
            f"missing tools: {', '.join(missing)} not on PATH "
            "(as root: apt-get install -y cmake ninja-build g++ ccache)"
        )
    check_models(config)
    check_quants(config, config["measure"].get("quants"), "measure.quants")
    m = config["measure"]  # a start-up error, not one per bench job
    check_repetitions(m.get("repetitions", 1), int(m.get("warmup_rounds", 1)),
                      str(m.get("round_statistic", "mean")))
    retire_threshold = (m.get("retire") or {}).get("threshold")
    for phase in ("prefill", "decode"):
        check_rounds_rule(m.get("rounds_from_noise"), phase, threshold_for(retire_threshold, phase))
    quality = config.get("quality") or {}
    if quality.get("enabled"):
        check_settings(quality)
    srv = config.get("serving") or {}
    unknown = [w for w in srv.get("lever_rungs") or [] if not any(w in k for k in known.values())]
    if unknown:  # a fleet may name rungs of either arch's ladder: each host sweeps its own
        raise LadderError(f"serving.lever_rungs: {unknown} not rungs of the "
                          + " or ".join(f"{n} ladder ({', '.join(k)})" for n, k in known.items()))
    targets = set(config["build"].get("targets") or [])
    for exp in server_experiments():  # each declares the tool it runs (its x-serving)
        if not (srv.get(exp.key) or {}).get("enabled"):
            continue
        if exp.tool not in targets:
            raise LadderError(f"serving.{exp.key} needs {exp.tool}: add it to build.targets "
                              f"(or set serving.{exp.key}.enabled: false)")
        if "corpus" in exp.inputs and not quality.get("corpus"):
            raise LadderError(f"serving.{exp.key} takes its text from quality.corpus: set one")
    cap = (srv.get("load") or {}).get("capacity") or {}
    if cap.get("enabled") and not (float(cap["min_rps"]) <= float(cap["start_rps"])
                                   <= float(cap["max_rps"])):
        raise LadderError("serving.load.capacity: start_rps must lie between min_rps and "
                          f"max_rps (min_rps {cap['min_rps']}, start_rps {cap['start_rps']}, "
                          f"max_rps {cap['max_rps']})")
    kt = config.get("kernel_tests") or {}
    if kt.get("enabled"):
        need = [t for t in ("test-quantize-fns", "test-quantize-perf") if t not in targets]
        tests_on = str((config["build"].get("common_cmake") or {}).get("LLAMA_BUILD_TESTS",
                                                                       "OFF")).upper()
        if need or tests_on not in {"ON", "1", "TRUE", "YES"}:
            raise LadderError("kernel_tests needs " + (f"{', '.join(need)} in build.targets"
                              if need else "") + (" and " if need and tests_on != "ON" else "")
                              + ("build.common_cmake.LLAMA_BUILD_TESTS: ON" if tests_on not in
                                 {"ON", "1", "TRUE", "YES"} else "")
                              + " (or set kernel_tests.enabled: false)")
    hot = config.get("hotspots") or {}
    if hot.get("enabled"):
        from ladder.planning.stages import phase_workloads
        phase_workloads(hot, config["measure"]["workloads"])
    # an unknown instance fails now, not after the measurements
    for h in hosts:
        host_price(config.get("cost"), h.instance)
    emulated = [h for h in hosts if h.emulated]
    if emulated:
        em = emulation.settings_of(config)
        models = em.get("cpu_models") or {}
        for h in emulated:
            if h.cpu not in models:
                raise LadderError(f"host {h.name}: cpu {h.cpu!r} is not in emulation.cpu_models "
                                  f"(known: {', '.join(models) or 'none'}); add it with the "
                                  "-march its rungs are built with")
            name = models[h.cpu].get("emulator")
            if name:  # named and complete before any job (fetched by fetch_emulator)
                from ladder.preparing import emulators
                emulators.identity(name, emulators.spec_of(
                    config, name, f"emulation.cpu_models.{h.cpu}"))
        if quality.get("enabled"):
            try:
                check_settings({**quality, **(em.get("quality") or {})})
            except LadderError as exc:
                raise LadderError(f"emulation.quality: {exc}") from exc
        check_phases((em.get("dispatch") or {}).get("workloads") or {},
                     "emulation.dispatch.workloads")
        check_quants(config, em.get("quants"), "emulation.quants")
