# The serving levers: each experiment point measures every rung interleaved, like `bench`.
rule serve_bench:
    input:
        unpack(serving_inputs),
    output:
        samples=paths.pattern("serving_point"),
        raw=directory(paths.beside("serving_point", ".raw")),
    log:
        "logs/{host}/serving/{experiment}/{model}/{point}/t{threads}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=6000, runtime=120),
        budget_s=bench_budget_s,
        budget_cells=bench_budget_cells,
    params:
        rungs=serving_point_rungs,
        point=serving_point,
        settings=serving_settings,
        policy=serving_policy,
        code=code("serve_bench"),
    script:
        "../../scripts/serve_bench.py"


# The experiments that run their own tool (llama-server, llama-batched-bench), each declared by
# its config block's x-serving (planning/serving_experiments.py): one job per host, model and
# thread count, every rung in each round.
rule serve:
    input:
        unpack(server_inputs),
    output:
        json=paths.pattern("serving_run"),
        raw=directory(paths.beside("serving_run", ".raw")),
    log:
        "logs/{host}/serving/{experiment}/{model}/t{threads}.log",
    wildcard_constraints:
        experiment="|".join(SERVER_EXPERIMENTS),
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=6000, runtime=120),
        budget_s=bench_budget_s,
        budget_cells=bench_budget_cells,
    params:
        rungs=rung_params,
        levers=server_levers,
        budgeted=lambda wc: SERVER_EXPERIMENTS[wc.experiment].budgeted,
        measure=lambda wc: SERVER_EXPERIMENTS[wc.experiment].measure,
        settings=server_settings,
        policy=serving_policy,
        code=code("serve", server_module),
    script:
        "../../scripts/serve.py"
