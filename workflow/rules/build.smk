rule build:
    input:
        source=source_json,
    output:
        provenance="results/builds/{build_key}/provenance.json",
    log:
        "logs/build/{build_key}.log",
    benchmark:
        "benchmarks/build/{build_key}.tsv"
    conda:
        "../../envs/ladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=6000,
        runtime=90,
    params:
        recipe=lambda wc: PLAN.recipe_params(wc.build_key),
        material=lambda wc: PLAN.material(wc.build_key),
        generator=config["build"]["generator"],
        jobs=config["build"]["jobs"],
        ccache_dir=f"{R}/ccache" if config["build"]["ccache"] else None,
    script:
        "../../scripts/build.py"


rule rung:
    input:
        rung_target_inputs,
    output:
        json="results/rungs/{rung}.json",
    log:
        "logs/rung/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        rung=lambda wc: PLAN.rung_summary(PLAN.rung(wc.rung)),
    script:
        "../../scripts/rung_card.py"
