rule dispatch:
    input:
        unpack(dispatch_inputs),
    output:
        json="results/dispatch/{model}/{rung}.json",
        raw=directory("results/dispatch/{model}/{rung}.raw"),
    log:
        "logs/dispatch/{model}/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: workflow.cores
    resources:
        runtime=60,
    params:
        rung=lambda wc: {
            **PLAN.rung_summary(PLAN.rung(wc.rung)),
            "family": PLAN.rung(wc.rung).family,
        },
        quants=dispatch_quants,
        # the gate (must_dispatch) is the ledger's business: editing it reruns no sweep
        settings={k: v for k, v in config["dispatch"].items() if k != "must_dispatch"},
        threads=lambda wc: PLAN.dispatch_threads(),
        code=code_hash(
            "dispatch", "kernels", "uprobes", "debugger", "lldb_driver", "run"
        ),
    script:
        "../../scripts/dispatch.py"


rule ledger:
    input:
        rungs=ledger_inputs,
        host="results/host.json",
    output:
        "results/dispatch/ledger.json",
    log:
        "logs/dispatch/ledger.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        must=config["dispatch"]["must_dispatch"],
        code=code_hash("dispatch"),
    script:
        "../../scripts/ledger.py"


rule dispatch_gate:
    input:
        "results/dispatch/ledger.json",
    output:
        "results/dispatch/gate.ok",
    log:
        "logs/dispatch/gate.log",
    conda:
        "../../envs/ladder.yaml"
    script:
        "../../scripts/dispatch_gate.py"
