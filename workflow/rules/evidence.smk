rule evidence:
    input:
        build=rung_provenance,
        model=evidence_model,
    output:
        json="results/evidence/{model}/{quant}/{rung}.json",
        raw="results/evidence/{model}/{quant}/{rung}.log",
    log:
        "logs/evidence/{model}/{quant}/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: workflow.cores
    resources:
        runtime=20,
    params:
        rung=lambda wc: PLAN.rung_summary(PLAN.rung(wc.rung)),
        settings=config["evidence"],
        threads=max(PLAN.threads()),
        code=code_hash("evidence", "parse", "run"),
    script:
        "../../scripts/evidence.py"
