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
    params:
        rungs=serving_point_rungs,
        point=serving_point,
        settings=serving_settings(),
        policy=serving_policy,
        code=code("serve_bench"),
    script:
        "../../scripts/serve_bench.py"


rule serve_prefix:
    input:
        unpack(serving_inputs),
        corpus=lambda wc: corpus_files()["txt"],
    output:
        json=paths.pattern("serving_prefix"),
        raw=directory(paths.beside("serving_prefix", ".raw")),
    log:
        "logs/{host}/serving/prefix_cache/{model}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=6000, runtime=120),
    params:
        rungs=rung_params,
        settings=serving_settings("prefix_cache"),
        threads=measure_threads,
        policy=serving_policy,
        code=code("serve_prefix"),
    script:
        "../../scripts/serve_prefix.py"


rule serve_concurrency:
    input:
        unpack(serving_inputs),
    output:
        json=paths.pattern("serving_concurrency"),
        raw=directory(paths.beside("serving_concurrency", ".raw")),
    log:
        "logs/{host}/serving/concurrency/{model}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=6000, runtime=120),
    params:
        rungs=rung_params,
        settings=serving_settings("concurrency"),
        threads=measure_threads,
        policy=serving_policy,
        code=code("serve_concurrency"),
    script:
        "../../scripts/serve_concurrency.py"


# Serving under load: llama-server per rung under ladder's load generator, rungs in turns.
rule serve_load:
    input:
        unpack(serving_inputs),
    output:
        json=paths.pattern("serving_load"),
        raw=directory(paths.beside("serving_load", ".raw")),
    log:
        "logs/{host}/serving/load/{model}/t{threads}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=6000, runtime=120),
    params:
        rungs=rung_params,
        settings=load_settings,
        policy=serving_policy,
        code=code("serve_load"),
    script:
        "../../scripts/serve_load.py"
