rule fetch_corpus:
    output:
        txt=f"{R}/corpus/{{corpus_id}}.txt",
        meta=f"{R}/corpus/{{corpus_id}}.json",
    log:
        "logs/corpus/{corpus_id}.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        spec=config["quality"]["corpus"],
    script:
        "../../scripts/fetch_corpus.py"


rule quality:
    input:
        unpack(quality_inputs),
    output:
        json=paths.pattern("quality"),
        raw=paths.beside("quality", ".log"),
    log:
        "logs/{host}/quality/{model}/{quant}/{rung}.log",
    # first of all: the floor's logits, then every rung's KL pass, is an emulated host's longest
    # chain (CI, 2026-12-06: 210 s then 250 s, started last behind the dispatch jobs)
    priority: 3
    conda:
        "../../envs/ladder.yaml"
    threads: run_threads
    resources:
        **host_resources(mem_mb=4000, runtime=30),
    params:
        rung=rung_summary,
        reference=is_reference,
        settings=quality_settings,
        threads=measure_threads,
        logits_dir=paths.pattern("quality_logits"),
        code=code("quality"),
    script:
        "../../scripts/quality.py"
