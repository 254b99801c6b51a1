rule fetch_source:
    output:
        json=f"{R}/sources/{{source_id}}/source.json",
    log:
        "logs/source/{source_id}.log",
    conda:
        "../../envs/ladder.yaml"
    resources:
        runtime=30,
    params:
        source=config["source"],
        downloads=f"{R}/downloads",
    script:
        "../../scripts/fetch_source.py"


rule host_facts:
    output:
        json="results/host.json",
    log:
        "logs/host.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        code=code_hash("host"),
    script:
        "../../scripts/host_facts.py"


rule bandwidth:
    output:
        json="results/host/bandwidth.json",
    log:
        "logs/host/bandwidth.log",
    conda:
        "../../envs/ladder.yaml"
    threads: workflow.cores
    params:
        probe=config["report"]["bandwidth_probe"],
        code=code_hash("bandwidth"),
    script:
        "../../scripts/bandwidth.py"
