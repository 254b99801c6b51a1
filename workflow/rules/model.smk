rule fetch_model:
    output:
        gguf=f"{R}/models/{{model}}/{{model}}.gguf",
        meta=f"{R}/models/{{model}}/{{model}}.json",
    log:
        "logs/model/{model}.log",
    conda:
        "../../envs/ladder.yaml"
    resources:
        runtime=30,
    params:
        spec=lambda wc: config["models"][wc.model],
        site=lambda wc: f"{R}/pypi/{wc.model}",
    script:
        "../../scripts/fetch_model.py"


rule quantize:
    input:
        base=lambda wc: f"{R}/models/{wc.model}/{wc.model}.json",
        quantizer=quantizer_provenance,
    output:
        gguf="results/models/{model}/{quant}.gguf",
        meta="results/models/{model}/{quant}.json",
    log:
        "logs/quantize/{model}-{quant}.log",
    benchmark:
        "benchmarks/quantize/{model}-{quant}.tsv"
    conda:
        "../../envs/ladder.yaml"
    threads: lambda wc: threads_of(QUANTIZE_HOST)
    resources:
        slurm_partition=lambda wc: HOSTS[QUANTIZE_HOST].partition or "",
        constraint=lambda wc: HOSTS[QUANTIZE_HOST].constraint,
        runtime=20,
    script:
        "../../scripts/quantize.py"
