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
        json="results/quality/{model}/{quant}/{rung}.json",
        raw="results/quality/{model}/{quant}/{rung}.log",
    log:
        "logs/quality/{model}/{quant}/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: workflow.cores
    resources:
        runtime=30,
    params:
        rung=lambda wc: PLAN.rung_summary(PLAN.rung(wc.rung)),
        reference=lambda wc: wc.rung == PLAN.reference_rung,
        settings=config["quality"],
        threads=max(PLAN.threads()),
        logits_dir="results/quality/logits",
        code=code_hash("quality", "parse", "run"),
    script:
        "../../scripts/quality.py"
