rule evidence:
    input:
        build=rung_provenance,
        model=evidence_model,
    output:
        json=paths.pattern("evidence"),
        raw=paths.beside("evidence", ".log"),
    log:
        "logs/{host}/evidence/{model}/{quant}/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: run_threads
    resources:
        **host_resources(mem_mb=4000, runtime=20),
    params:
        rung=rung_summary,
        settings=config["evidence"],
        threads=measure_threads,
        code=code("evidence"),
    script:
        "../../scripts/evidence.py"
