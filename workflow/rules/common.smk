# Input functions and the plan of the run. Hosts come from the validated config; each host's
# plan (ladder, build keys, thread counts) is made from the facts its host_facts checkpoint read
# on the node, so a native build is keyed by the CPU it was built for.
import os
import sys

from ladder.preparing import emulators
from ladder.core import paths
from ladder.core.errors import LadderError
from ladder.core.machine import host_facts as local_facts
from ladder.core.hosts import check_facts
from ladder.core.io import read_json
from ladder.planning.config import start_up
from ladder.core import codeid
from ladder.planning import protocol
from ladder.planning.plan import Plan, all_sources
from ladder.preparing.source import base_of, source_id
from ladder.reporting.sections import SECTIONS
from ladder.planning.serving_experiments import BENCH_EXPERIMENTS, server_experiments
from ladder.preparing.vendor import vendor_id
from snakemake.exceptions import IncompleteCheckpointException

# the schema, the hosts and every start-up check (ladder.planning.config.start_up)
SCHEMA = f"{workflow.basedir}/workflow/schemas/config.schema.yaml"
HOSTS = {h.name: h for h in start_up(config, SCHEMA)}
# the serving experiments that run their own tool, each declared by its block's x-serving
SERVER_EXPERIMENTS = {e.key: e for e in server_experiments(SCHEMA)}
R = str(config.get("resources_dir", "resources"))
# builds and models are content-addressed, so they live beside the downloads and can be shared
B = Plan.builds_dir_of(config)
# models are arch-independent files: quantized once, by the first real host's quantizer build
QUANTIZE_HOST = next((n for n, h in HOSTS.items() if not h.emulated), None)
if QUANTIZE_HOST is None:
    raise LadderError(
        "hosts: every host is emulated; list this machine too ({name: local}): its "
        "quantizer build makes the models the emulated hosts load"
    )


wildcard_constraints:
    build_key="[0-9a-f]{16}",
    source_id="[0-9a-f]{16}",
    model_sha="[0-9a-f]{16}",
    vendor="[A-Za-z][A-Za-z0-9_]*",
    vendor_id="[0-9a-f]{16}",
    rung="[a-z][a-z0-9_]*",
    threads="[0-9]+",
    host="[a-z][a-z0-9_]*",
    experiment="|".join(BENCH_EXPERIMENTS),
    point="[a-z0-9_]+",


_PLANS = {}


_CODE = codeid.code_hashes()  # every script's identity, once per parse


def code(script, entry=None):
    """A script rule's code identity: its adapter and every package module it reaches (derived
    from the imports, ladder.core.codeid). ``entry``: a function of a job's wildcards naming the
    module the adapter imports by name (the serve rule's experiment), whose reach counts too
    (and no other experiment's: an edit to one re-measures none of the others)."""
    if entry is None:
        return _CODE[script]
    known = {}

    def identity(wildcards):
        name = entry(wildcards)
        if name not in known:
            known[name] = codeid.code_hash(script, name)
        return known[name]

    return identity


def host(name):
    if name not in HOSTS:
        raise LadderError(f"unknown host {name!r} (hosts: {', '.join(HOSTS)})")
    return HOSTS[name]


def facts_path(name):
    return paths.result("host", host=name)


def plannable_now(name):
    """A host whose facts can be read while the DAG is built: this machine (recorded facts, or
    read here and now). A SLURM host's facts are read on its node and an emulated host's in its
    guest, so those wait for their host_facts checkpoint."""
    h = host(name)
    return not (h.remote or h.emulated)


def host_plan(name):
    """The host's plan, from its facts (raises until its host_facts checkpoint has run).

    This machine is planned at once, from its recorded facts or, before the first run, from the
    same facts read in this process (what its host_facts job will record), so a dry run shows
    the whole chain. A job running remotely (a SLURM job step) has only its own job in its DAG:
    the checkpoint ran before it was submitted, so it reads the facts file directly."""
    h = host(name)
    path = facts_path(name)
    if workflow.remote_exec or (plannable_now(name) and os.path.exists(path)):
        stamp = (path, os.stat(path).st_mtime_ns)
        facts = None
    elif plannable_now(name):
        stamp, facts = ("probed", None), local_facts(name)
    else:
        path = checkpoints.host_facts.get(host=name).output.json
        stamp, facts = (path, os.stat(path).st_mtime_ns), None
    if _PLANS.get(name, (None,))[0] != stamp:
        facts = facts if facts is not None else read_json(path)
        check_facts(h, facts, path)
        _PLANS[name] = (stamp, Plan.from_config(config, h, facts))
    return _PLANS[name][1]


def unplanned_hosts():
    """Hosts whose plan waits for their facts job (named in a dry run's summary)."""
    return [
        n for n in HOSTS if not plannable_now(n) and not os.path.exists(facts_path(n))
    ]


def build_host(key):
    """The first host (in config order) whose plan has this build key builds it."""
    for name in HOSTS:
        if key in host_plan(name).recipes_by_key:
            return name
    raise LadderError(f"build key {key} belongs to no host's plan (stale target?)")


def build_vendor(wildcards):
    """The vendor_source records (KleidiAI) a build needs: their check is a job's."""
    plan = host_plan(build_host(wildcards.build_key))
    return [
        f"{R}/vendor/{name}/{vid}/vendor.json"
        for name, vid in plan.vendor_records(wildcards.build_key)
    ]


def vendor_spec(wildcards):
    spec = (config.get("vendor_sources") or {}).get(wildcards.vendor)
    if spec is None or vendor_id(wildcards.vendor, spec) != wildcards.vendor_id:
        raise LadderError(
            f"vendor source {wildcards.vendor}/{wildcards.vendor_id} is not the one "
            "vendor_sources names now (stale target?)"
        )
    return spec


def emulation_facts_settings(wildcards):
    """What an emulated host's facts depend on (not its workloads: editing those reruns no
    facts); None for a real host."""
    h = host(wildcards.host)
    if not h.emulated:
        return None
    em = config["emulation"]
    model = em["cpu_models"][h.cpu]
    out = {
        "qemu": em["qemu"],
        "sysroot": em["sysroot"],
        "cpu_models": {h.cpu: model},
    }
    if model.get("emulator"):  # its identity, not its path (the record gives the path)
        out["emulator"] = emulator_identity(
            model["emulator"], f"emulation.cpu_models.{h.cpu}"
        )
    return out


def emulator_identity(name, where):
    return emulators.identity(name, emulators.spec_of(config, name, where))


def host_emulator(wildcards):
    """The fetched emulator an emulated host's CPU model runs under (none: the system's QEMU)."""
    h = host(wildcards.host)
    if not h.emulated:
        return []
    name = config["emulation"]["cpu_models"][h.cpu].get("emulator")
    if not name:
        return []
    spec = emulators.spec_of(config, name, f"emulation.cpu_models.{h.cpu}")
    return [f"{R}/emulators/{name}/{emulators.emulator_id(name, spec)}/emulator.json"]


def emulator_spec(wildcards):
    spec = emulators.spec_of(config, wildcards.emulator, "fetch_emulator")
    if emulators.emulator_id(wildcards.emulator, spec) != wildcards.emulator_id:
        raise LadderError(
            f"emulator {wildcards.emulator}/{wildcards.emulator_id} is not the one "
            "emulation.emulators names now (stale target?)"
        )
    return spec


def build_ccache_scope(key):
    facts = host_plan(build_host(key)).facts
    return facts.get("ccache_scope") or facts["identity"]


def builder_known(wildcards):
    """No files: resolving the builder waits (checkpoint) for the facts of the hosts before it
    in config order, and only those: adding a host later rebuilds nothing."""
    build_host(wildcards.build_key)
    return []


# --- where jobs go: SLURM resources from the host (ignored by the local executor) -----------
def _host_of(wc):
    return wc.host if hasattr(wc, "host") else build_host(wc.build_key)


def host_partition(wc):
    return host(_host_of(wc)).partition or ""


def host_constraint(wc):
    # the plugin adds -C only for a non-None value; "" would ask for no feature
    return host(_host_of(wc)).constraint


def threads_of(name):
    """Threads a host's build and measurement jobs take: all of them (the node to itself)."""
    h = host(name)
    return h.cpus if h.remote else workflow.cores


def quantize_threads(wildcards):
    """Cores a quantization reserves: one on this machine, where it uses every CPU it may run on
    (scripts/quantize.py). It is no measurement and never runs beside one (those reserve every
    core); reserving both cores held the emulated lane up (CI sim 2026-12-06: a 1-s quantize
    waited 4 min behind KleidiAI's one-core test suite, and every QEMU job waited behind it).
    A SLURM host's job: the CPUs it asks for."""
    return threads_of(QUANTIZE_HOST) if host(QUANTIZE_HOST).remote else 1


def host_threads(wc):
    return threads_of(_host_of(wc))


def run_threads(wc):
    """Cores a run job reserves: all of a real host's (nothing may disturb a measurement). An
    emulated host's runs are evidence only, timed by nobody, and mostly one QEMU thread each:
    one core, so Snakemake runs two of them at once on two cores (the guest's -t is its own).
    """
    return 1 if host(wc.host).emulated else threads_of(wc.host)


def host_extra(wc):
    h = host(_host_of(wc))
    return h.slurm_extra if h.remote else ""


def host_resources(mem_mb=None, runtime=30, extra=True):
    """The SLURM resources of a host's job (ignored by the local executor): its partition,
    constraint, the host's slurm_extra (a measuring or building job: the node to itself),
    memory and runtime."""
    res = {
        "slurm_partition": host_partition,
        "constraint": host_constraint,
        "runtime": runtime,
    }
    if extra:
        res["slurm_extra"] = host_extra
    if mem_mb:
        res["mem_mb"] = host_mem(mem_mb)
    return res


def host_mem(default):
    return lambda wc: host(_host_of(wc)).mem_mb or default


# --- paths -----------------------------------------------------------------------------------
def source_json(wildcards=None):
    return f"{R}/sources/{Plan.source_id_of(config)}/source.json"


def build_source_json(wildcards):
    """The source a build is made from: its rung's own (another version, or patched), else
    the ladder's."""
    sid = host_plan(build_host(wildcards.build_key)).build_source_id(
        wildcards.build_key
    )
    return f"{R}/sources/{sid}/source.json"


_SOURCES = {}


def source_spec(wildcards):
    """The source spec a fetch_source job makes (the ladder's, or a rung's own)."""
    if not _SOURCES:
        _SOURCES.update(all_sources(config))
    if wildcards.source_id not in _SOURCES:
        raise LadderError(
            f"source {wildcards.source_id} is not one the config names now (stale target?)"
        )
    return _SOURCES[wildcards.source_id]


def source_base(wildcards):
    """A patched source's base: its record is the fetch_source job's input."""
    spec = source_spec(wildcards)
    if not spec.get("patches"):
        return []
    return [f"{R}/sources/{source_id(base_of(spec))}/source.json"]


def provenance(build_key):
    return f"{B}/{build_key}/provenance.json"


def rung_provenance(wildcards):
    return provenance(host_plan(wildcards.host).build_keys[wildcards.rung])


def model_dir(model):
    """A fetched model's folder, addressed by the sha256 its config entry pins."""
    return f"{R}/models/{model}/{config['models'][model]['sha256'][:16]}"


def model_meta(model, quant):
    """The meta JSON of a model file: the fetched one, or a quant derived from it by the
    quantizer build (whose key is in the path: another quantizer is another file).

    Its path is its identity (the pinned sha256, the quantizer build key), so consumers take it
    as ancient(): a same-bytes rewrite (a forced re-fetch, another work dir sharing
    resources_dir) gets a fresh mtime from Snakemake, and must not rerun what used it.
    """
    if config["models"][model]["quant"].lower() == quant.lower():
        return ancient(f"{model_dir(model)}/base.json")
    return ancient(
        f"{model_dir(model)}/{host_plan(QUANTIZE_HOST).quantizer_key}/{quant}.json"
    )


def cut_from(wildcards):
    """A cut model's input: the meta JSON of the model it is cut from (none for a fetch)."""
    spec = config["models"][wildcards.model]
    if spec["kind"] != "cut":
        return {}
    return {"parent": ancient(f"{model_dir(spec['from'])}/base.json")}


def checked_model_spec(wildcards):
    spec = config["models"][wildcards.model]
    if spec["sha256"][:16] != wildcards.model_sha:
        raise LadderError(
            f"models.{wildcards.model}.sha256: a target asks for {wildcards.model_sha}, the "
            f"config pins {spec['sha256'][:16]}"
        )
    return spec


def quantizer_provenance(wildcards):
    return provenance(wildcards.build_key)


def evidence_model(wildcards):
    return model_meta(wildcards.model, wildcards.quant)


def bench_inputs(wildcards):
    plan = host_plan(wildcards.host)
    return {
        "model": model_meta(wildcards.model, wildcards.quant),
        "builds": [provenance(plan.build_keys[r.name]) for r in plan.applicable],
    }


def rung_params(wildcards):
    """Every applicable rung's entry (settings + build provenance): bench and serving jobs."""
    return host_plan(wildcards.host).rung_entries(provenance)


def server_levers(wildcards):
    """A serve job's lever settings on each lever rung (its block's levers; [] for none)."""
    return host_plan(wildcards.host).server_levers(wildcards.experiment, provenance)


def grid_params(wildcards):
    """A reconciliation cell's entries: every applicable rung at every reconcile.threads count."""
    return host_plan(wildcards.host).grid_entries(provenance)


def rung_summary(wildcards):
    plan = host_plan(wildcards.host)
    return plan.rung_summary(plan.rung(wildcards.rung))


def measure_threads(wildcards):
    return max(host_plan(wildcards.host).threads())


def report_inputs(wildcards):
    plan = host_plan(wildcards.host)
    host = wildcards.host
    return {
        "source": source_json(),
        "host": paths.result("host", host=host),
        "builds": sorted(
            {provenance(plan.build_keys[r.name]) for r in plan.applicable}
        ),
        "models": [model_meta(m, q) for m, q in plan.model_quants()],
        "evidence": [
            paths.result("evidence", host=host, model=m, quant=q, rung=r.name)
            for m, q in plan.model_quants()
            for r in plan.applicable
        ],
        "bench": [
            paths.result("bench", host=host, model=m, quant=q, workload=w, threads=t)
            for m, q, w, t in plan.cells()
        ],
        "quality": [
            paths.result("quality", host=host, model=m, quant=q, rung=r)
            for m, q in plan.model_quants()
            for r in plan.quality_rungs()
        ],
        "bandwidth": (
            [paths.result("bandwidth", host=host)] if plan.bandwidth_enabled else []
        ),
        "ledger": [paths.result("ledger", host=host)] if plan.dispatch_enabled else [],
        "gate": (
            [paths.result("gate", host=host)]
            if plan.dispatch_enabled and config["dispatch"]["must_dispatch"]
            else []
        ),
        # each registered section's inputs (ladder.reporting.sections), from its <key>_files function
        **{
            name: files
            for section in SECTIONS
            for name, files in globals()[f"{section.key}_files"](wildcards).items()
        },
    }


def reconcile_files(wildcards):
    """The reconciliation section's inputs: its cells, and the dispatch ledger (which kernels
    ran at each rung's best count)."""
    plan = host_plan(wildcards.host)
    host = wildcards.host
    return {
        "reconcile": [
            paths.result("reconcile", host=host, model=m, quant=q, workload=w)
            for m, q, w in plan.reconcile_cells()
        ],
        "reconcile_ledger": (
            [paths.result("ledger", host=host)]
            if plan.dispatch_enabled
            and (plan.reconcile_cells() or plan.reconcile_dispatch_only())
            else []
        ),
    }


def hotspots_files(wildcards):
    """The hotspots section's inputs: each sampled rung's hotspot JSON."""
    plan = host_plan(wildcards.host)
    return {
        "hotspots": [
            paths.result("hotspots", host=wildcards.host, model=m, quant=q, rung=r)
            for m, q in plan.model_quants()
            for r in plan.hotspot_rungs()
        ]
    }


def kernel_tests_files(wildcards):
    """The kernel-tests section's inputs: each tested rung's JSON (ggml's tests), and each
    KleidiAI rung's run of KleidiAI's own suite."""
    plan = host_plan(wildcards.host)
    return {
        "kernel_tests": [
            paths.result("kernel_tests", host=wildcards.host, rung=r)
            for r in plan.kernel_test_rungs()
        ],
        "vendor_tests": [
            paths.result("vendor_tests", host=wildcards.host, rung=r)
            for r in plan.vendor_test_rungs()
        ],
    }


def rung_target_inputs(wildcards):
    plan = host_plan(wildcards.host)
    if wildcards.rung not in plan.build_keys:
        raise LadderError(
            f"host {wildcards.host}: rung {wildcards.rung!r} is not in ladder "
            f"{plan.ladder_name} ({', '.join(plan.build_keys)})"
        )
    if wildcards.rung in plan.not_applicable:
        return []
    return [rung_provenance(wildcards)] + [
        paths.result(
            "evidence", host=wildcards.host, model=m, quant=q, rung=wildcards.rung
        )
        for m, q in plan.model_quants()
    ]


def corpus_files(wildcards=None):
    cid = Plan.corpus_id_of(config)
    return {"txt": f"{R}/corpus/{cid}.txt", "meta": f"{R}/corpus/{cid}.json"}


def quality_inputs(wildcards):
    plan = host_plan(wildcards.host)
    ref = plan.reference_rung
    inputs = {
        "build": provenance(plan.build_keys[wildcards.rung]),
        "floor_build": provenance(plan.build_keys[ref]),
        "model": model_meta(wildcards.model, wildcards.quant),
        **corpus_files(),
    }
    if wildcards.rung != ref:
        # the floor's small result JSON, not its logits file: see ladder/measuring/quality.py
        inputs["floor_result"] = paths.result(
            "quality",
            host=wildcards.host,
            model=wildcards.model,
            quant=wildcards.quant,
            rung=ref,
        )
    return inputs


def is_reference(wildcards):
    return wildcards.rung == host_plan(wildcards.host).reference_rung


def families_file():
    return config["dispatch"].get("families_file") or os.path.join(
        workflow.basedir, "workflow/data/kernel_families.yaml"
    )


def dispatch_quants(wildcards):
    return [
        q for m, q in host_plan(wildcards.host).model_quants() if m == wildcards.model
    ]


def dispatch_inputs(wildcards):
    plan = host_plan(wildcards.host)
    base = plan.dispatch_base(wildcards.rung)  # a toggle runs its rung's binary
    inputs = {
        "build": provenance(plan.build_keys[base]),
        "families": families_file(),
    }
    for q in dispatch_quants(wildcards):
        inputs[f"model_{q}"] = model_meta(wildcards.model, q)
        inputs[f"evidence_{q}"] = paths.result(
            "evidence",
            host=wildcards.host,
            model=wildcards.model,
            quant=q,
            rung=base,
        )
    return inputs


def dispatch_rung(wildcards):
    return host_plan(wildcards.host).dispatch_unit(wildcards.rung)


def dispatch_priority(wildcards):
    """A vendor library's dispatch jobs (its rung and runtime toggles) start first: the most
    kernel symbols to translate and count, so the longest jobs (emulated, 2026-12-02: KleidiAI
    468 s and its SME toggle 314 s; floor 114 s, native_repack 152 s). Started last, one ran
    alone at the end while the other core idled.

    Before an emulated host's facts exist (its dispatch file asked for alone, in a fresh work
    dir) the plan is not known yet: 0, and Snakemake asks again once the checkpoint has run (it
    would take the [] its own input-function wrapper returns for a pending checkpoint as a
    non-numeric priority and stop)."""
    try:
        unit = host_plan(wildcards.host).dispatch_unit(wildcards.rung)
    except IncompleteCheckpointException:
        return 0
    return 1 if (unit.get("recipe") or {}).get("vendor") else 0


def dispatch_threads(wildcards):
    return host_plan(wildcards.host).dispatch_threads()


def dispatch_settings(wildcards):
    return host_plan(wildcards.host).dispatch_settings()


def quality_settings(wildcards):
    return host_plan(wildcards.host).quality_settings()


def hotspot_inputs(wildcards):
    plan = host_plan(wildcards.host)
    sampled = set(plan.hotspot_settings()["workloads"].values())
    threads = set(plan.hotspot_threads())
    return {
        "build": provenance(plan.build_keys[wildcards.rung]),
        "model": model_meta(wildcards.model, wildcards.quant),
        "families": families_file(),
        # the bench cells' speeds set each sampled run's repetitions (hotspots.min_seconds)
        "bench": [
            paths.result(
                "bench",
                host=wildcards.host,
                model=m,
                quant=q,
                workload=w,
                threads=t,
            )
            for m, q, w, t in plan.cells()
            if (m, q) == (wildcards.model, wildcards.quant)
            and w in sampled
            and t in threads
        ],
    }


def hotspot_settings(wildcards):
    return host_plan(wildcards.host).hotspot_settings()


def hotspot_workloads(wildcards):
    """Only the workloads this job samples: adding another reruns no hotspot job."""
    names = set(hotspot_settings(wildcards)["workloads"].values())
    return {n: config["measure"]["workloads"][n] for n in sorted(names)}


def bench_settings(wildcards):
    """One bench cell's measurement settings: measure less what names the other cells (the
    workloads, quants and thread counts), so adding a cell re-measures no other, and less the
    run's budget (shared at run time: bench_budget)."""
    skip = ("workloads", "quants", "threads", "budget")
    return {k: v for k, v in config["measure"].items() if k not in skip}


def bench_budget_s(wildcards):
    """The host's measuring budget in seconds (measure.budget; 0: none), a resource so that
    changing it re-measures nothing (ladder.planning.budget)."""
    minutes = config["measure"].get("budget")
    return int(round(float(minutes) * 60)) if minutes else 0


def bench_budget_cells(wildcards):
    """How many measuring cells the host's budget is shared by: its bench cells, its
    llama-bench serving points (the levers, context, toggle) and the cells of the serving
    experiments that share it (x-serving budgeted: depth)."""
    plan = host_plan(wildcards.host)
    served = sum(
        plan.server_cells(key) for key, e in SERVER_EXPERIMENTS.items() if e.budgeted
    )
    return (
        len(plan.cells())
        + len(plan.reconcile_cells())
        + len(plan.serving_points())
        + served
    )


def hotspot_threads(wildcards):
    return host_plan(wildcards.host).hotspot_threads()


def kernel_test_quants(wildcards):
    return sorted({q for _, q in host_plan(wildcards.host).model_quants()})


def kernel_test_settings(wildcards):
    return host_plan(wildcards.host).kernel_test_settings()


def vendor_test_timeout(wildcards):
    return host_plan(wildcards.host).kernel_test_settings()["vendor"]["timeout_s"]


def rung_builder_known(wildcards):
    """No files: a rung's build may be another host's (emulated hosts share cross builds), and
    naming that host (build_host) waits for the facts of the hosts before it, as the build does
    (builder_known): a parameter may not wait for a checkpoint, an input may."""
    build_host(host_plan(wildcards.host).build_keys[wildcards.rung])
    return []


def vendor_test_ccache(wildcards):
    """The rung's own build's compiler cache (the suite compiles the same kernels)."""
    if not config["build"]["ccache"]:
        return None
    key = host_plan(wildcards.host).build_keys[wildcards.rung]
    return f"{R}/ccache/{build_ccache_scope(key)}"


def ledger_inputs(wildcards):
    plan = host_plan(wildcards.host)
    models = sorted({m for m, _ in plan.model_quants()})
    return [
        paths.result("dispatch", host=wildcards.host, model=m, rung=r)
        for m in models
        for r in plan.dispatch_rungs()
    ]


def report_plan(wildcards):
    return host_plan(wildcards.host).report_plan()


def render_templates(kind="ladder"):
    return [
        os.path.join(workflow.basedir, "workflow/templates", f"{kind}.{ext}.j2")
        for ext in ("md", "html")
    ]


def final_reports():
    """What `snakemake report` (and the default target) makes: every host's rendered report and
    the fleet report."""
    return expand(paths.pattern("report"), host=HOSTS, ext=["html", "md"]) + expand(
        paths.pattern("fleet"), ext=["html", "md"]
    )


def host_reports(wildcards=None):
    return [paths.result("report_json", host=h) for h in HOSTS]


# --- serving levers ----------------------------------------------------------------------------
def serving_files(wildcards):
    """The serving section's inputs: every serving result of a host, keyed like its plan."""
    plan = host_plan(wildcards.host)
    host = wildcards.host
    models = plan.serving_model_quants()
    points = [
        paths.result("serving_point", host=host, model=m, **p)
        for m, _ in models
        for p in plan.serving_points()
    ]
    cfg, threads = config["serving"], measure_threads(wildcards)
    return {
        "serving_points": points,
        **{
            f"serving_{key}": (
                [
                    paths.result(
                        "serving_run",
                        host=host,
                        experiment=key,
                        model=m,
                        threads=threads,
                    )
                    for m, _ in models
                ]
                if cfg[key]["enabled"]
                else []
            )
            for key in SERVER_EXPERIMENTS
        },
    }


def serving_settings(wildcards):
    """A llama-bench serving point's own settings: the quant (its point carries the rest), so a
    change to another experiment re-measures none of its points (its rounds and timeout are its
    policy's, ``serving_policy``)."""
    return {"quant": config["serving"]["quant"]}


def serving_policy(wildcards):
    """How every serving experiment is measured: ``ladder.planning.protocol.serving_policy``."""
    return protocol.serving_policy(config["measure"], config["serving"])


def server_settings(wildcards):
    """An experiment's own settings: the quant and its config block (another experiment's are
    not its inputs)."""
    s = config["serving"]
    out = {"quant": s["quant"], wildcards.experiment: s[wildcards.experiment]}
    keeps = SERVER_EXPERIMENTS[wildcards.experiment].keeps
    if keeps:  # where it keeps its content-addressed state (x-serving keeps)
        out["keeps"] = f"{R}/{keeps}"
    return out


def server_module(wildcards):
    """The measuring module a serve job runs: its experiment's (x-serving measure)."""
    return SERVER_EXPERIMENTS[wildcards.experiment].module


def server_inputs(wildcards):
    """A serve job's inputs: the model and builds, and the files its experiment declares."""
    named = {"corpus": lambda: corpus_files()["txt"]}
    return {
        **serving_inputs(wildcards),
        **{k: named[k]() for k in SERVER_EXPERIMENTS[wildcards.experiment].inputs},
    }


def serving_inputs(wildcards):
    plan = host_plan(wildcards.host)
    return {
        "model": model_meta(wildcards.model, config["serving"]["quant"].lower()),
        "builds": sorted(
            {provenance(plan.build_keys[r.name]) for r in plan.applicable}
        ),
    }


def serving_point(wildcards):
    return host_plan(wildcards.host).serving_point(
        wildcards.experiment, wildcards.point, wildcards.threads
    )


def serving_point_rungs(wildcards):
    plan = host_plan(wildcards.host)
    return plan.serving_rungs(serving_point(wildcards), provenance)


# a dry run names the hosts whose jobs it cannot list yet
if not workflow.remote_exec:
    for _name in unplanned_hosts():
        print(
            f"ladder: host {_name}: planned once its host_facts job has read its facts "
            f"({HOSTS[_name].where()}); a dry run lists only that job for it",
            file=sys.stderr,
        )
