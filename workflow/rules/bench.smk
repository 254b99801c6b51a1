rule bench:
    input:
        unpack(bench_inputs),
    output:
        samples=paths.pattern("bench"),
        raw=directory(paths.beside("bench", ".raw")),
    log:
        "logs/{host}/bench/{model}/{quant}/{workload}/t{threads}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=4000, runtime=120),
        budget_s=bench_budget_s,
        budget_cells=bench_budget_cells,
    params:
        rungs=rung_params,
        workload=lambda wc: config["measure"]["workloads"][wc.workload],
        measure=bench_settings,
        code=code("bench"),
    script:
        "../../scripts/bench.py"


# Thread reconciliation: every rung at every reconcile.threads count in one cell's rounds.
rule reconcile:
    input:
        unpack(bench_inputs),
    output:
        samples=paths.pattern("reconcile"),
        raw=directory(paths.beside("reconcile", ".raw")),
    log:
        "logs/{host}/reconcile/{model}/{quant}/{workload}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=4000, runtime=120),
        budget_s=bench_budget_s,
        budget_cells=bench_budget_cells,
    params:
        rungs=grid_params,
        workload=lambda wc: config["measure"]["workloads"][wc.workload],
        measure=bench_settings,
        code=code("reconcile"),
    script:
        "../../scripts/reconcile.py"
