# Input functions and the plan of the run, computed once from the validated config.
import os

from ladder.plan import Plan, code_hash

PLAN = Plan.from_config(config)
R = PLAN.resources_dir


wildcard_constraints:
    build_key="[0-9a-f]{16}",
    source_id="[0-9a-f]{16}",
    rung="[a-z][a-z0-9_]*",
    threads="[0-9]+",


def source_json(wildcards=None):
    return f"{R}/sources/{PLAN.source_id}/source.json"


def provenance(build_key):
    return f"results/builds/{build_key}/provenance.json"


def rung_provenance(wildcards):
    return provenance(PLAN.build_keys[wildcards.rung])


def model_meta(model, quant):
    if PLAN.is_base_quant(model, quant):
        return f"{R}/models/{model}/{model}.json"
    return f"results/models/{model}/{quant}.json"


def evidence_model(wildcards):
    return model_meta(wildcards.model, wildcards.quant)


def bench_inputs(wildcards):
    return {
        "model": model_meta(wildcards.model, wildcards.quant),
        "builds": [provenance(PLAN.build_keys[r.name]) for r in PLAN.applicable],
    }


def rung_params(wildcards):
    return [
        {**PLAN.rung_summary(r), "provenance": provenance(PLAN.build_keys[r.name])}
        for r in PLAN.applicable
    ]


def report_inputs(wildcards):
    return {
        "source": source_json(),
        "host": "results/host.json",
        "builds": sorted(
            {provenance(PLAN.build_keys[r.name]) for r in PLAN.applicable}
        ),
        "models": [model_meta(m, q) for m, q in PLAN.model_quants()],
        "evidence": [
            f"results/evidence/{m}/{q}/{r.name}.json"
            for m, q in PLAN.model_quants()
            for r in PLAN.applicable
        ],
        "bench": [
            f"results/bench/{m}/{q}/{w}/t{t}.json" for m, q, w, t in PLAN.cells()
        ],
        "quality": [
            f"results/quality/{m}/{q}/{r}.json"
            for m, q in PLAN.model_quants()
            for r in PLAN.quality_rungs()
        ],
        "bandwidth": (
            ["results/host/bandwidth.json"]
            if config["report"]["bandwidth_probe"]["enabled"]
            else []
        ),
        "ledger": ["results/dispatch/ledger.json"] if PLAN.dispatch_enabled else [],
        "gate": (
            ["results/dispatch/gate.ok"]
            if PLAN.dispatch_enabled and config["dispatch"]["must_dispatch"]
            else []
        ),
    }


def rung_target_inputs(wildcards):
    if wildcards.rung not in PLAN.build_keys:
        raise ValueError(
            f"rung {wildcards.rung!r} is not in ladder {PLAN.ladder_name} "
            f"({', '.join(PLAN.build_keys)})"
        )
    return [rung_provenance(wildcards)] + [
        f"results/evidence/{m}/{q}/{wildcards.rung}.json"
        for m, q in PLAN.model_quants()
    ]


def corpus_files(wildcards=None):
    cid = PLAN.corpus_id()
    return {"txt": f"{R}/corpus/{cid}.txt", "meta": f"{R}/corpus/{cid}.json"}


def quality_inputs(wildcards):
    ref = PLAN.reference_rung
    inputs = {
        "build": provenance(PLAN.build_keys[wildcards.rung]),
        "floor_build": provenance(PLAN.build_keys[ref]),
        "model": model_meta(wildcards.model, wildcards.quant),
        **corpus_files(),
    }
    if wildcards.rung != ref:
        # the floor's small result JSON, not its logits file: see ladder/quality.py
        inputs["floor_result"] = (
            f"results/quality/{wildcards.model}/{wildcards.quant}/{ref}.json"
        )
    return inputs


def families_file():
    return config["dispatch"].get("families_file") or os.path.join(
        workflow.basedir, "workflow/data/kernel_families.yaml"
    )


def dispatch_quants(wildcards):
    return [q for m, q in PLAN.model_quants() if m == wildcards.model]


def dispatch_inputs(wildcards):
    inputs = {
        "build": provenance(PLAN.build_keys[wildcards.rung]),
        "families": families_file(),
    }
    for q in dispatch_quants(wildcards):
        inputs[f"model_{q}"] = model_meta(wildcards.model, q)
        inputs[f"evidence_{q}"] = (
            f"results/evidence/{wildcards.model}/{q}/{wildcards.rung}.json"
        )
    return inputs


def ledger_inputs(wildcards):
    models = sorted({m for m, _ in PLAN.model_quants()})
    return [
        f"results/dispatch/{m}/{r}.json" for m in models for r in PLAN.dispatch_rungs()
    ]


def render_templates():
    return [
        os.path.join(workflow.basedir, "workflow/templates", t)
        for t in ("ladder.md.j2", "ladder.html.j2")
    ]
