rule bench:
    input:
        unpack(bench_inputs),
    output:
        samples="results/bench/{model}/{quant}/{workload}/t{threads}.json",
        raw=directory("results/bench/{model}/{quant}/{workload}/t{threads}.raw"),
    log:
        "logs/bench/{model}/{quant}/{workload}/t{threads}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: workflow.cores
    resources:
        runtime=120,
    params:
        rungs=rung_params,
        workload=lambda wc: config["measure"]["workloads"][wc.workload],
        measure=config["measure"],
        code=code_hash("bench", "run", "parse"),
    script:
        "../../scripts/bench.py"
