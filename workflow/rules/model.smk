# The .gguf beside each meta JSON is not a declared output: Snakemake would delete it before a
# rerun, and a fetch or quantization that finds it present with the right hash leaves it alone.
rule fetch_model:
    input:
        unpack(cut_from),
    output:
        meta=f"{R}/models/{{model}}/{{model_sha}}/base.json",
    log:
        "logs/model/{model}-{model_sha}.log",
    conda:
        "../../envs/ladder.yaml"
    resources:
        runtime=30,
    params:
        spec=lambda wc: checked_model_spec(wc),
        site=lambda wc: f"{R}/pypi/{wc.model}",
    script:
        "../../scripts/fetch_model.py"


rule quantize:
    input:
        base=ancient(f"{R}/models/{{model}}/{{model_sha}}/base.json"),
        quantizer=quantizer_provenance,
    output:
        meta=f"{R}/models/{{model}}/{{model_sha}}/{{build_key}}/{{quant}}.json",
    log:
        "logs/quantize/{model}-{model_sha}-{build_key}-{quant}.log",
    benchmark:
        "benchmarks/quantize/{model}-{model_sha}-{build_key}-{quant}.tsv"
    conda:
        "../../envs/ladder.yaml"
    threads: quantize_threads
    resources:
        slurm_partition=lambda wc: HOSTS[QUANTIZE_HOST].partition or "",
        constraint=lambda wc: HOSTS[QUANTIZE_HOST].constraint,
        runtime=20,
    script:
        "../../scripts/quantize.py"
