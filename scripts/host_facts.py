import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.adapter import run_step
from ladder.emulation import emulated_facts
from ladder.machine import host_facts
from ladder.io import atomic_write_json

name, cpu = snakemake.wildcards.host, snakemake.params.emulated
run_step(snakemake, lambda: atomic_write_json(
    snakemake.output.json,
    emulated_facts(host_name=name, model=cpu, settings=snakemake.params.emulation,
                   probe_dir=snakemake.params.probe_dir) if cpu else host_facts(name)))
