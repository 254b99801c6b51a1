rule dispatch:
    input:
        unpack(dispatch_inputs),
    output:
        json=paths.pattern("dispatch"),
        raw=directory(paths.beside("dispatch", ".raw")),
    log:
        "logs/{host}/dispatch/{model}/{rung}.log",
    priority: dispatch_priority
    conda:
        "../../envs/ladder.yaml"
    threads: run_threads
    resources:
        **host_resources(mem_mb=4000, runtime=60),
    params:
        rung=dispatch_rung,
        quants=dispatch_quants,
        settings=dispatch_settings,
        threads=dispatch_threads,
        code=code("dispatch"),
    script:
        "../../scripts/dispatch.py"


rule ledger:
    input:
        rungs=ledger_inputs,
        host=paths.pattern("host"),
    output:
        paths.pattern("ledger"),
    log:
        "logs/{host}/dispatch/ledger.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        must=config["dispatch"]["must_dispatch"],
        code=code("ledger"),
    script:
        "../../scripts/ledger.py"


rule dispatch_gate:
    input:
        paths.pattern("ledger"),
    output:
        paths.pattern("gate"),
    log:
        "logs/{host}/dispatch/gate.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        code=code("dispatch_gate"),
    script:
        "../../scripts/dispatch_gate.py"
