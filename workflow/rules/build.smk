# A build runs on the first host whose plan has its key: a native build on the CPU it targets
# (its key holds that CPU's -march=native expansion), a generic one once per arch and compiler.
rule build:
    input:
        source=build_source_json,
        builder=builder_known,
        vendor=build_vendor,
    output:
        provenance=f"{B}/{{build_key}}/provenance.json",
    log:
        "logs/build/{build_key}.log",
    benchmark:
        "benchmarks/build/{build_key}.tsv"
    # builds first: every later job of every rung can then start as soon as a core is free
    # (in the emulated lane the KleidiAI build waited 12 min behind lower rungs' jobs, and its
    # dispatch, the longest job there, ran alone at the end)
    priority: 10
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(mem_mb=6000, runtime=90),
    params:
        host=lambda wc: build_host(wc.build_key),
        recipe=lambda wc: host_plan(build_host(wc.build_key)).recipe_params(
            wc.build_key
        ),
        material=lambda wc: host_plan(build_host(wc.build_key)).material(wc.build_key),
        generator=config["build"]["generator"],
        jobs=config["build"]["jobs"],
        # one compiler cache per CPU identity: -march=native objects never cross CPUs (cross
        # builds name their -march, so the emulated hosts share one)
        ccache_dir=lambda wc: (
            f"{R}/ccache/{build_ccache_scope(wc.build_key)}"
            if config["build"]["ccache"]
            else None
        ),
    script:
        "../../scripts/build.py"


rule rung:
    input:
        rung_target_inputs,
    output:
        json=paths.pattern("rung_card"),
    log:
        "logs/{host}/rung/{rung}.log",
    conda:
        "../../envs/ladder.yaml"
    params:
        rung=rung_summary,
        code=code("rung_card"),
    script:
        "../../scripts/rung_card.py"
