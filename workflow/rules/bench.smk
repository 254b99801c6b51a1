rule bench:
    input:
        unpack(bench_inputs),
    output:
        samples=f"{H}/bench/{{model}}/{{quant}}/{{workload}}/t{{threads}}.json",
        raw=directory(f"{H}/bench/{{model}}/{{quant}}/{{workload}}/t{{threads}}.raw"),
    log:
        "logs/{host}/bench/{model}/{quant}/{workload}/t{threads}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        slurm_partition=host_partition,
        constraint=host_constraint,
        slurm_extra=host_extra,
        mem_mb=host_mem(4000),
        runtime=120,
    params:
        rungs=rung_params,
        workload=lambda wc: config["measure"]["workloads"][wc.workload],
        measure=config["measure"],
        confidence=config["stats"]["confidence"],
        code=code("bench", "bench", "run", "parse", "host"),
    script:
        "../../scripts/bench.py"
