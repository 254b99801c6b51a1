import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.preparing.emulation import emulated_facts
from ladder.core.machine import host_facts
from ladder.core.io import atomic_write_json, read_json

name, cpu = snakemake.wildcards.host, snakemake.params.emulated


def facts():
    if not cpu:
        return host_facts(name)
    settings = dict(snakemake.params.emulation)
    if snakemake.input.emulator:  # the model's own emulator, fetched: its record gives the path
        settings["emulator"] = read_json(snakemake.input.emulator[0])
    return emulated_facts(host_name=name, model=cpu, settings=settings,
                          probe_dir=snakemake.params.probe_dir)


run_step(snakemake, lambda: atomic_write_json(snakemake.output.json, facts()))
