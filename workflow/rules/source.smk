# The ladder's source, a rung's own (another version, commit or tree), or a rung's patched
# copy of one (its base's record is the input; a patch that does not apply is recorded).
rule fetch_source:
    input:
        base=source_base,
    output:
        json=f"{R}/sources/{{source_id}}/source.json",
    log:
        "logs/source/{source_id}.log",
    conda:
        "../../envs/ladder.yaml"
    resources:
        runtime=30,
    params:
        source=source_spec,
        downloads=f"{R}/downloads",
    script:
        "../../scripts/fetch_source.py"


# A rung's FetchContent dependency (KleidiAI): checked (sha256, or upstream reachability) and
# unpacked by a job, never while the DAG is planned; the record says whether the build can use it.
rule vendor_source:
    output:
        json=f"{R}/vendor/{{vendor}}/{{vendor_id}}/vendor.json",
    log:
        "logs/vendor/{vendor}.{vendor_id}.log",
    # before every build (priority 10): a second's check, and the vendor rung's build waits for
    # it; run later, it let 1-core jobs take the cores and the 2-core build waited 11 min
    priority: 20
    conda:
        "../../envs/ladder.yaml"
    resources:
        runtime=10,
    params:
        spec=vendor_spec,
        code=code("vendor_source"),
    script:
        "../../scripts/vendor_source.py"


# A pinned QEMU user-mode emulator from Debian's packages (a CPU model the system's QEMU lacks,
# e.g. SME2): downloaded, checked against its sha256 and unpacked by a job, once per pin.
rule fetch_emulator:
    output:
        json=f"{R}/emulators/{{emulator}}/{{emulator_id}}/emulator.json",
    log:
        "logs/emulators/{emulator}.{emulator_id}.log",
    priority: 20
    conda:
        "../../envs/ladder.yaml"
    resources:
        runtime=20,
    params:
        spec=emulator_spec,
        downloads=f"{R}/downloads",
        code=code("fetch_emulator"),
    script:
        "../../scripts/fetch_emulator.py"


# Read on the node itself: every later job of the host is planned from these facts.
checkpoint host_facts:
    input:
        emulator=host_emulator,
    output:
        json=paths.pattern("host"),
    log:
        "logs/{host}/host.log",
    conda:
        "../../envs/ladder.yaml"
    resources:
        **host_resources(runtime=10, extra=False),
    params:
        # an emulated host's facts come from the guest CPU (a HWCAP probe under qemu)
        emulated=lambda wc: host(wc.host).cpu if host(wc.host).emulated else None,
        emulation=emulation_facts_settings,
        probe_dir=f"{R}/emulation",
        code=code("host_facts"),
    script:
        "../../scripts/host_facts.py"


rule bandwidth:
    output:
        json=paths.pattern("bandwidth"),
    log:
        "logs/{host}/bandwidth.log",
    conda:
        "../../envs/ladder.yaml"
    threads: host_threads
    resources:
        **host_resources(runtime=20),
    params:
        probe=config["report"]["bandwidth_probe"],
        code=code("bandwidth"),
    script:
        "../../scripts/bandwidth.py"
