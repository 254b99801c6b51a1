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


# KleidiAI's own test suite, built from the rung's KleidiAI source, run on the host (under its
# emulator on an emulated host): which of the kernels llama.cpp calls pass (ladder.measuring.vendor_tests)
rule vendor_tests:
    input:
        build=rung_provenance,
        builder=rung_builder_known,
    output:
        json=paths.pattern("vendor_tests"),
        raw=directory(paths.beside("vendor_tests", ".raw")),
    log:
        "logs/{host}/kernels/{rung}.vendor.log",
    # an emulated host's suite (one core, one googletest shard) starts with the first jobs
    # (after the quality chain): it ran last, on both cores, while the last quality job left
    # one idle (CI, 2026-12-06: 3.7 min)
    priority: 2
    conda:
        "../../envs/ladder.yaml"
    threads: run_threads
    resources:
        **host_resources(mem_mb=4000, runtime=60),
    params:
        rung=rung_summary,
        timeout_s=vendor_test_timeout,
        jobs=config["build"]["jobs"],
        resources_dir=R,
        ccache_dir=vendor_test_ccache,
        code=code("vendor_tests"),
    script:
        "../../scripts/vendor_tests.py"
