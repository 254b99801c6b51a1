rule hotspots:
    input:
        unpack(hotspot_inputs),
    output:
        json=paths.pattern("hotspots"),
        raw=directory(paths.beside("hotspots", ".raw")),
    log:
        "logs/{host}/hotspots/{model}/{quant}/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: run_threads
    resources:
        **host_resources(mem_mb=4000, runtime=30),
    params:
        rung=rung_summary,
        settings=hotspot_settings,
        workloads=hotspot_workloads,
        threads=hotspot_threads,
        code=code("hotspots"),
    script:
        "../../scripts/hotspots.py"


rule kernel_tests:
    input:
        build=rung_provenance,
    output:
        json=paths.pattern("kernel_tests"),
        raw=directory(paths.beside("kernel_tests", ".raw")),
    log:
        "logs/{host}/kernels/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    threads: run_threads
    resources:
        **host_resources(mem_mb=2000, runtime=15),
    params:
        rung=rung_summary,
        quants=kernel_test_quants,
        settings=kernel_test_settings,
        code=code("kernel_tests"),
    script:
        "../../scripts/kernel_tests.py"
