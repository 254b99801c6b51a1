"""The plan of a run, derived once from the validated config: what to build, run and measure."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, cast

from ladder.core.errors import LadderError
from ladder.core.hosts import Host
from ladder.core.io import canonical_hash
from ladder.core.records import RungEntry
from ladder.core.kernels import load_families
from ladder.preparing import emulation
from ladder.planning import serving_experiments, stages
from ladder.planning.protocol import phase_of
from ladder.preparing.recipes import (
    Recipe,
    Rung,
    build_key,
    build_key_material,
    not_applicable_reason,
    quantizer_recipe,
    rungs_from_config,
    select_ladder_name,
)
from ladder.preparing.source import base_of, source_id

def recipe_source_id(recipe: Recipe, ladder_source_id: str) -> str:
    spec = recipe.source_spec
    return source_id(spec) if spec else ladder_source_id


def all_sources(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every source a config names, by id: the ladder's, each rung's own, and the base each
    patched one is patched onto (what a fetch_source job may be asked to make)."""
    out = {source_id(config["source"]): dict(config["source"])}
    for name in config["ladders"]:
        for r in rungs_from_config(config, name):
            spec = r.recipe.source_spec
            if spec:
                out[source_id(spec)] = spec
                # the base of a patched source: when it is the ladder's own (or another rung's)
                # the spec already there is kept, so that its job's params read the same
                # whatever rungs the config has (a dict of another key order is other params
                # to Snakemake: every build and measurement would run again)
                out.setdefault(source_id(base_of(spec)), base_of(spec))
    return out


def resolve_threads(values: list[Any], cores: int | None = None) -> list[int]:
    """Thread counts; 'all' is the host's CPU count (its facts; else this machine's)."""
    out: list[int] = []
    for v in values:
        n = (cores or os.cpu_count() or 1) if v == "all" else int(v)
        if n not in out:
            out.append(n)
    return out


def grid_name(rung: str, threads: int) -> str:
    """The name of a rung at one thread count in a reconciliation cell."""
    return f"{rung}@t{threads}"


def ladder_of(config: Mapping[str, Any], host: Host, arch: str) -> str:
    """The ladder a host runs: emulation.ladder for an emulated host (the Arm ladder), else
    'ladder' (auto: the one named after the host's arch)."""
    if host.emulated:
        name = str(emulation.settings_of(config)["ladder"])
        if name not in config["ladders"]:
            raise LadderError(f"emulation.ladder: {name!r} is not a key of config.ladders "
                              f"({sorted(config['ladders'])})")
        return name
    return select_ladder_name(config, arch)


@dataclass
class Plan:
    """One host's plan, made from the facts its host_facts job read on the node."""

    config: Mapping[str, Any]
    host: Host
    facts: Mapping[str, Any]
    ladder_name: str
    rungs: list[Rung]
    source_id: str
    build_keys: dict[str, str]
    recipes_by_key: dict[str, Recipe]
    quantizer_key: str
    not_applicable: dict[str, str]
    resources_dir: str
    # what this host measures (the emulated lane's overlay applied): emulation.effective_settings
    settings: dict[str, Any]

    @classmethod
    def from_config(cls, config: Mapping[str, Any], host: Host,
                    facts: Mapping[str, Any]) -> "Plan":
        name = ladder_of(config, host, facts["arch"])
        rungs = rungs_from_config(config, name)
        if host.emulated:
            em = emulation.settings_of(config)
            # no control twin: a noise floor is for throughput, never measured under emulation
            rungs = emulation.emulated_rungs([r for r in rungs if not r.twin_of],
                                             facts["emulated"]["march"],
                                             em.get("targets") or ["llama-bench"])
        sid = source_id(config["source"])
        keys: dict[str, str] = {}
        recipes: dict[str, Recipe] = {}
        for r in rungs:
            keys[r.name] = build_key(r.recipe, recipe_source_id(r.recipe, sid), facts)
            recipes[keys[r.name]] = r.recipe
        qrecipe = quantizer_recipe(config, name)
        qkey = build_key(qrecipe, sid, facts)
        recipes[qkey] = qrecipe
        flags = frozenset(facts.get("cpu_flags") or [])
        na = {}
        for r in rungs:
            reason = not_applicable_reason(r, arch=facts["arch"], cpu_flags=flags)
            if reason:
                na[r.name] = reason
        return cls(config, host, facts, name, rungs, sid, keys, recipes, qkey, na,
                   str(config.get("resources_dir", "resources")),
                   emulation.effective_settings(config, host.emulated))

    @staticmethod
    def builds_dir_of(config: Mapping[str, Any]) -> str:
        """Builds are content-addressed by key, so they live with the shared resources."""
        return str(config.get("builds_dir") or
                   f"{config.get('resources_dir', 'resources')}/builds")

    @staticmethod
    def source_id_of(config: Mapping[str, Any]) -> str:
        return source_id(config["source"])

    @staticmethod
    def corpus_id_of(config: Mapping[str, Any]) -> str:
        return canonical_hash(dict(config["quality"]["corpus"]), 16)

    # --- rungs -----------------------------------------------------------------------------
    @property
    def applicable(self) -> list[Rung]:
        return [r for r in self.rungs if r.name not in self.not_applicable]

    @property
    def control(self) -> Rung | None:
        return next((r for r in self.rungs if r.twin_of), None)

    @property
    def ladder_order(self) -> list[str]:
        """Rung names in ladder order, without the control."""
        return [r.name for r in self.rungs if not r.twin_of]

    def rung(self, name: str) -> Rung:
        for r in self.rungs:
            if r.name == name:
                return r
        raise LadderError(f"rung {name!r} is not in ladder {self.ladder_name}")

    def vendor_records(self, key: str) -> list[tuple[str, str]]:
        """(name, vendor id) of each FetchContent source a build needs (its vendor_source job)."""
        return [(name, canonical_hash(json.loads(ident), 16))
                for name, ident in self.recipes_by_key[key].vendor]

    def recipe_params(self, key: str) -> dict[str, Any]:
        return self.recipes_by_key[key].as_dict()

    def material(self, key: str) -> dict[str, Any]:
        return build_key_material(self.recipes_by_key[key], self.build_source_id(key),
                                  self.facts)

    def build_source_id(self, key: str) -> str:
        """The source a build is made from: its rung's own, else the ladder's."""
        return recipe_source_id(self.recipes_by_key[key], self.source_id)

    def rung_summary(self, r: Rung, built_as: str | None = None) -> dict[str, Any]:
        """A rung's settings as every job and the report see them (``built_as``: the rung
        whose binary a runtime variant or second label uses)."""
        return {
            "name": r.name, "label": r.label, "adds": r.adds, "twin_of": r.twin_of,
            "build_key": self.build_keys[built_as or r.name], "recipe": r.recipe.as_dict(),
            "runtime": r.runtime.as_dict(), "env": dict(r.runtime.env),
            "bench_argv": r.runtime.bench_argv(), "common_argv": r.runtime.common_argv(),
            "mechanisms": r.mechanisms,
            "negative_controls": list(r.negative_controls),
            "markers": [m.__dict__ for m in r.markers],
            "not_applicable": self.not_applicable.get(r.name),
            **self.guest(),
        }

    # --- the emulated lane ------------------------------------------------------------------
    @property
    def emulated(self) -> bool:
        return self.host.emulated

    @property
    def emulation(self) -> Mapping[str, Any]:
        return emulation.settings_of(self.config)


    def guest(self) -> dict[str, Any]:
        """How a rung's tools are started on this host: under qemu for an emulated host, and
        the CPU flags (L1 evidence) of the guest CPU, not of the x86 machine carrying it."""
        if not self.emulated:
            return {}
        return {"launcher": emulation.host_launcher(self.emulation, self.facts),
                "guest": {"arch": "aarch64", "cpu": self.host.cpu,
                          "cpu_flags": list(self.facts.get("cpu_flags") or []),
                          "timeout_s": self.settings["timeout_s"]}}

    # --- models and cells -------------------------------------------------------------------
    def model_quants(self) -> list[tuple[str, str]]:
        wanted = self.settings["quants"]
        wanted_l = {q.lower() for q in wanted} if wanted else None
        models = self.settings.get("models")
        out = []
        for m, spec in self.config["models"].items():
            if models and m not in models:
                continue
            for q in [spec["quant"], *spec.get("derive", [])]:
                if wanted_l is None or q.lower() in wanted_l:
                    out.append((m, q.lower()))
        return out

    @property
    def threads_all(self) -> int | None:
        """What 'all' threads means on this host: the CPUs its jobs get. The CPUs the facts job
        could run on, capped by the host's ``cpus`` (what a SLURM job asks for: on a node shared
        without task binding, every job sees all the node's cores, and two 1-CPU jobs each
        running 2 threads disturb each other)."""
        seen = self.facts.get("usable_cpus") or self.facts.get("cores")
        if self.host.cpus and seen:
            return min(int(seen), int(self.host.cpus))
        return seen or self.host.cpus

    def threads(self) -> list[int]:
        return resolve_threads(list(self.config["measure"]["threads"]), self.threads_all)

    def cells(self) -> list[tuple[str, str, str, int]]:
        if not self.settings["throughput"]:
            return []  # evidence only: emulated throughput is never measured
        workloads = [w for w, spec in self.config["measure"]["workloads"].items() if spec]
        return [(m, q, w, t) for m, q in self.model_quants() for w in workloads
                for t in self.threads()]

    # --- thread reconciliation (each rung at its own best thread count) ----------------------
    def reconcile_threads(self) -> list[int]:
        """The thread counts a reconciliation cell pairs in its rounds (reconcile.threads)."""
        want = (self.config.get("reconcile") or {}).get("threads") or []
        got = resolve_threads(list(want), self.threads_all)
        over = [t for t in got if self.threads_all and t > int(self.threads_all)]
        if over:
            raise LadderError(f"reconcile.threads: {over} above host {self.host.name}'s "
                              f"{self.threads_all} CPUs (its jobs' CPUs)")
        return got

    def reconcile_cells(self) -> list[tuple[str, str, str]]:
        """(model, quant, workload) of every reconciliation cell: reconcile.quants and
        .workloads (null: the bench's; one switched off in measure.workloads is off) of the
        phases in reconcile.phases (null: both), on a host that measures throughput, when two or
        more thread counts are named."""
        rc = self.config.get("reconcile") or {}
        if not rc.get("enabled") or not self.settings["throughput"] or len(
                self.reconcile_threads()) < 2:
            return []
        quants = {q.lower() for q in rc.get("quants") or []}
        known = self.config["measure"]["workloads"]
        for w in rc.get("workloads") or []:
            if w not in known:
                raise LadderError(f"reconcile.workloads: {w!r} is not a workload of "
                                  f"measure.workloads ({', '.join(known)})")
        phases = set(rc.get("phases") or ("prefill", "decode"))
        # a workload switched off (null) in measure.workloads is off here too
        names = [w for w in rc.get("workloads") or known
                 if known[w] and phase_of(known[w]) in phases]
        return [(m, q, w) for m, q in self.model_quants() if not quants or q in quants
                for w in names]

    def reconcile_dispatch_only(self) -> bool:
        """A host that measures no throughput (the emulated lane's overlay) with the
        reconciliation on: no timing, the dispatch ledger at each thread count in its place."""
        rc = self.config.get("reconcile") or {}
        return bool(rc.get("enabled")) and not self.settings["throughput"] and self.dispatch_enabled

    def grid_entries(self, provenance: Any) -> list[RungEntry]:
        """A reconciliation cell's entries: every applicable rung of the ladder at every count
        of ``reconcile_threads`` (named ``<rung>@t<n>``, in rung order, then count), and the
        control at the largest count, the second label of its twin there (the cell's A/A
        pair)."""
        counts = self.reconcile_threads()
        out: list[RungEntry] = []
        for r in self.applicable:
            for t in counts if not r.twin_of else [max(counts)]:
                entry = self.rung_entry(r, provenance)
                entry["name"] = grid_name(r.name, t)
                if r.twin_of:
                    entry["twin_of"] = grid_name(r.twin_of, t)
                entry["reconcile"] = {"rung": r.name, "threads": t}
                out.append(entry)
        return out

    # --- quality drift ---------------------------------------------------------------------
    @property
    def quality_enabled(self) -> bool:
        q = self.config.get("quality") or {}
        return bool(q.get("enabled", False)) and bool(self.ladder_order) and (
            self.ladder_order[0] not in self.not_applicable)

    @property
    def reference_rung(self) -> str:
        return self.ladder_order[0]

    def quality_rungs(self) -> list[str]:
        """Every applicable rung but the control (it is the same build as its twin)."""
        if not self.quality_enabled:
            return []
        return [r.name for r in self.applicable if not r.twin_of]

    # --- dispatch ledger -------------------------------------------------------------------
    @property
    def dispatch_enabled(self) -> bool:
        return bool((self.config.get("dispatch") or {}).get("enabled", False))

    def dispatch_rungs(self) -> list[str]:
        """Applicable rungs but the control (the same build as its twin), then each one's
        runtime toggles: a job of their own (the same binary, swept beside the rung's job; on
        an emulated host the two run on two cores at once)."""
        if not self.dispatch_enabled:
            return []
        base = [r.name for r in self.applicable if not r.twin_of]
        return base + [t["name"] for b in base for t in self.dispatch_toggles(b)]

    def dispatch_unit(self, name: str) -> dict[str, Any]:
        """What one dispatch job sweeps: a rung as built, or a runtime toggle of one."""
        for r in self.applicable:
            if r.twin_of:
                continue
            if r.name == name:
                return {**self.rung_summary(r), "family": r.family}
            for t in self.dispatch_toggles(r.name):
                if t["name"] == name:
                    return dict(t)
        raise LadderError(f"dispatch: {name!r} is neither a measured rung nor a runtime toggle "
                          f"of one ({', '.join(self.dispatch_rungs())})")

    def dispatch_base(self, name: str) -> str:
        """The rung whose build and evidence a dispatch job uses (a toggle's: its rung's)."""
        return str(self.dispatch_unit(name).get("variant_of") or name)

    def dispatch_threads(self) -> list[int]:
        return resolve_threads(self.settings["dispatch_threads"], self.threads_all)

    def dispatch_toggles(self, rung: str) -> list[dict[str, Any]]:
        """Runtime toggles of one rung's binary swept as dispatch cells of their own: the
        serving toggle's variant (aarch64: GGML_KLEIDIAI_SME=0 on the KleidiAI rung), on an
        emulated host by default (emulation.dispatch.toggle), on a real one if dispatch.toggle."""
        on = self.settings["dispatch_toggle"]
        variant = serving_experiments.toggle_variant(self.serving, self.ladder_name)
        if not on or not variant or variant["rung"] != rung:
            return []
        base = self.rung(rung)
        variants = [variant, *self.sme_cap_variants(variant)]
        return [{**self.rung_summary(self.variant_rung(base, v), rung),
                 "variant_of": rung, "family": base.family} for v in variants]

    def sme_cap_variants(self, toggle: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The SME thread cap swept beside the toggle (emulation.dispatch.sme_caps): the toggle's
        rung under GGML_KLEIDIAI_SME=<cap>, named sme_cap<cap>, on a host whose guest has SME
        (elsewhere KleidiAI never reads the cap). With the rung itself (the cap KleidiAI
        chose) and the toggle (0: SME off) these are the seed's caps auto, 0, 2, 4."""
        caps = [int(c) for c in self.settings.get("dispatch_sme_caps") or []]
        if not caps or "sme" not in set(self.facts.get("cpu_flags") or []):
            return []
        env = dict((toggle.get("runtime") or {}).get("env") or {})
        if "GGML_KLEIDIAI_SME" not in env:  # the toggle is not KleidiAI's SME switch
            return []
        return [{"rung": toggle["rung"], "name": f"sme_cap{c}",
                 "runtime": {"env": {"GGML_KLEIDIAI_SME": str(c)}}} for c in caps]

    def dispatch_settings(self) -> dict[str, Any]:
        """The sweep's settings (the gate is the ledger's business: editing it reruns nothing)."""
        return dict(self.settings["dispatch"])

    def quality_settings(self) -> dict[str, Any]:
        return dict(self.settings["quality"])

    @property
    def bandwidth_enabled(self) -> bool:
        return bool(self.settings["bandwidth"])

    # --- hotspots and kernel tests ----------------------------------------------------------
    def _stage_reason(self, key: str, emulated_reason: str) -> str | None:
        """Why a configured stage does not run on this host (None: it runs, or is off): the
        lane's overlay turns it off on an emulated host."""
        on = bool((self.config.get(key) or {}).get("enabled", False))
        return emulated_reason if on and not self.settings[key] else None

    def hotspot_rungs(self) -> list[str]:
        """Applicable rungs but the control (the same build as its twin)."""
        if not self.settings["hotspots"]:
            return []
        return [r.name for r in self.applicable if not r.twin_of]

    def hotspot_threads(self) -> list[int]:
        want = (self.config.get("hotspots") or {}).get("threads")
        return resolve_threads(list(want), self.threads_all) if want else self.threads()

    def hotspot_settings(self) -> dict[str, Any]:
        """The hotspots settings with each phase's workload resolved to a bench workload."""
        hot = dict(self.config["hotspots"])
        hot["workloads"] = {p: w for p, (w, _) in stages.phase_workloads(
            hot, self.config["measure"]["workloads"]).items()}
        return hot

    def kernel_test_rungs(self) -> list[str]:
        if not self.settings["kernel_tests"]:
            return []
        return [r.name for r in self.applicable if not r.twin_of]

    def kernel_test_settings(self) -> dict[str, Any]:
        return dict(self.config["kernel_tests"])

    def vendor_test_rungs(self) -> list[str]:
        """Rungs built with a local KleidiAI source (its own test suite, ladder.vendor_tests):
        aarch64 rungs only, the suite's own target."""
        if not self.settings.get("vendor_tests"):
            return []
        return [r.name for r in self.applicable if not r.twin_of
                and any(name == "KleidiAI"
                        for name, _ in self.vendor_records(self.build_keys[r.name]))]

    # --- serving levers ---------------------------------------------------------------------
    @property
    def serving(self) -> Mapping[str, Any]:
        return self.config.get("serving") or {}

    def serving_model_quants(self) -> list[tuple[str, str]]:
        if not self.settings["serving"]:
            return []
        q = str(self.serving["quant"]).lower()
        return [(m, mq) for m, mq in self.model_quants() if mq == q]

    def lever_rungs(self) -> list[str]:
        """The rungs a lever (KV-cache type, micro-batch) is swept on: serving.lever_rungs, or
        every applicable rung above the floor (the builds people run; the floor alone when the
        ladder has nothing above it)."""
        want = self.serving.get("lever_rungs")
        names = [r.name for r in self.applicable if not r.twin_of]
        if want is not None:  # names no ladder has are a start-up error (config.check_config)
            return [n for n in names if n in want]
        return names[1:] or names[:1]

    def serving_points(self) -> list[dict[str, Any]]:
        """llama-bench points of the serving experiments (the toggle only where its rung runs;
        a lever once per lever rung). A point that runs on one rung names its own ladder,
        control and twin: the toggle's variant against its base, a lever's settings against
        its baseline, each with a second label of that base for the noise floor."""
        if not self.settings["serving"]:
            return []
        pts = serving_experiments.bench_points(self.serving, max(self.threads()))
        variant = serving_experiments.toggle_variant(self.serving, self.ladder_name)
        out = []
        for p in pts:
            if p["experiment"] == "toggle":
                if not variant or variant["rung"] not in [r.name for r in self.applicable]:
                    continue
                # its own noise floor: the control when it is the toggled rung's twin, else a
                # second label of the toggled rung itself, interleaved like the rest
                out.append({**p, "base": variant["rung"], "variant": variant["name"],
                            "ladder": [variant["rung"], variant["name"]],
                            "twin": variant["rung"],
                            "control": self.toggle_control(variant["rung"])})
            elif p.get("lever"):
                lever = p["lever"]
                baseline = lever["baseline"]
                for rung in self.lever_rungs():
                    out.append({**p, "point": f"{rung}_{p['point']}", "workload": p["point"],
                                "x": rung, "base": rung,
                                "ladder": list(lever["settings"]), "twin": baseline,
                                "control": f"{baseline}_twin"})
            else:
                out.append(p)
        return out

    def server_levers(self, experiment: str, provenance: Any) -> list[RungEntry]:
        """The lever settings a serving experiment that runs its own tool sweeps on each lever
        rung (its block's ``levers``: enabled, settings by name, the first the baseline): that
        rung's binary under each setting's extra server arguments, named
        ``<rung>+<setting>``, and a second label of the baseline (``..._twin``) for the lever's
        own noise floor. None when the experiment has no levers or they are off."""
        block = (self.serving.get(experiment) or {}) if self.settings["serving"] else {}
        levers = block.get("levers") or {}
        if not block.get("enabled") or not levers.get("enabled") or not levers.get("settings"):
            return []
        out: list[RungEntry] = []
        for rung in self.lever_rungs():
            base = self.rung(rung)
            variants = [self.variant_rung(base, {"name": f"{rung}+{name}", "runtime": {
                "common_args": [*base.runtime.common_args, *args]}})
                for name, args in levers["settings"].items()]
            baseline = variants[0]
            twin = replace(baseline, name=f"{baseline.name}_twin", twin_of=baseline.name,
                           label=f"{baseline.label}, second label (noise floor)")
            for v, setting in zip([*variants, twin], [*levers["settings"], None]):
                entry = self.rung_entry(v, provenance, base.name)
                entry["lever"] = {"base": rung, "setting": setting,
                                  "baseline": baseline.name}
                out.append(entry)
        return out

    def server_cells(self, experiment: str) -> int:
        """The cells a serving experiment that runs its own tool measures on this host: none
        when it is off, else its own and one per lever rung when its levers are on
        (``server_levers``)."""
        block = (self.serving.get(experiment) or {}) if self.settings["serving"] else {}
        if not block.get("enabled"):
            return 0
        levers = block.get("levers") or {}
        on = levers.get("enabled") and levers.get("settings")
        return 1 + (len(self.lever_rungs()) if on else 0)

    def serving_point(self, experiment: str, point: str, threads: int) -> dict[str, Any]:
        for p in self.serving_points():
            if (p["experiment"], p["point"], p["threads"]) == (experiment, point, int(threads)):
                return p
        raise LadderError(f"serving: no point {experiment}/{point}/t{threads} in the plan")

    def rung_entry(self, r: Rung, provenance: Any, built_as: str | None = None
                   ) -> RungEntry:
        """What a measuring job gets for one rung: its settings and its build's provenance. The
        one place a rung entry is made: variants and second labels come through here too."""
        entry = cast(RungEntry, {**self.rung_summary(r, built_as),
                                 "provenance": provenance(self.build_keys[built_as or r.name])})
        if built_as and built_as != r.name and not r.twin_of:
            entry["variant_of"] = built_as
        return entry

    def variant_rung(self, base: Rung, variant: Mapping[str, Any]) -> Rung:
        """The base rung's binary under a runtime variant (serving.toggle.variants: --repack 0,
        GGML_KLEIDIAI_SME=0): the same build, another name and runtime."""
        rt = variant.get("runtime") or {}
        env = {**base.runtime.env, **{str(k): str(v) for k, v in (rt.get("env") or {}).items()}}
        runtime = replace(base.runtime, env=env, repack=bool(rt.get("repack", base.runtime.repack)),
                          bench_args=tuple(rt.get("bench_args", base.runtime.bench_args)),
                          common_args=tuple(rt.get("common_args", base.runtime.common_args)))
        return replace(base, name=str(variant["name"]), twin_of=None, runtime=runtime,
                       label=f"{base.label} ({variant['name']})")

    def rung_entries(self, provenance: Any) -> list[RungEntry]:
        return [self.rung_entry(r, provenance) for r in self.applicable]

    def serving_rungs(self, p: Mapping[str, Any], provenance: Any) -> list[RungEntry]:
        """The rung entries one serving point measures: every rung, or for a point on one rung
        its variants of that rung's binary and the second label its floor comes from."""
        def entry(r: Rung) -> RungEntry:
            return self.rung_entry(r, provenance)

        if p["experiment"] != "toggle" and not p.get("lever"):
            return self.rung_entries(provenance)
        base = self.rung(p["base"])
        if p.get("lever"):
            variants = [self.variant_rung(base, {"name": name, "runtime": {
                "bench_args": [*base.runtime.bench_args, *args]}})
                for name, args in p["lever"]["settings"].items()]
            baseline = next(v for v in variants if v.name == p["twin"])
            twin = replace(baseline, name=p["control"], twin_of=p["twin"],
                           label=f"{baseline.label}, second label (noise floor)")
            return [self.rung_entry(v, provenance, base.name) for v in [*variants, twin]]
        variant = serving_experiments.toggle_variant(self.serving, self.ladder_name) or {}
        out = [entry(base),
               self.rung_entry(self.variant_rung(base, variant), provenance, base.name)]
        control = self.control
        if control and control.twin_of == p["base"] and control.name not in self.not_applicable:
            out.append(entry(control))
        else:
            twin = replace(base, name=self.toggle_control(base.name), twin_of=base.name,
                           label=f"{base.label} (control twin of the toggle)")
            out.append(self.rung_entry(twin, provenance, base.name))
        return out

    def toggle_control(self, base: str) -> str:
        """The rung name that gives a toggle on ``base`` its noise floor."""
        control = self.control
        if control and control.twin_of == base and control.name not in self.not_applicable:
            return control.name
        return f"{base}_twin"

    def report_plan(self) -> dict[str, Any]:
        control = self.control
        return {
            "ladder": self.ladder_name,
            "ladder_order": self.ladder_order,
            "control": control.name if control else None,
            "twin": control.twin_of if control else None,
            "rungs": [self.rung_summary(r) for r in self.rungs],
            "quantizer_build_key": self.quantizer_key,
            "reference": self.reference_rung if self.quality_enabled else None,
            "quality_tolerance": (self.config.get("quality") or {}).get("tolerance"),
            "source_id": self.source_id,
            "host": self.host.as_dict(),
            "serving_points": self.serving_points(),
            "cpu_identity": self.facts.get("identity"),
            "emulated": self.facts.get("emulated") if self.emulated else None,
            "hotspots_unavailable": self._stage_reason("hotspots",
                                                       stages.HOTSPOTS_EMULATED_REASON),
            "kernel_tests_unavailable": self._stage_reason("kernel_tests",
                                                           stages.KERNEL_TESTS_EMULATED_REASON),
        }
