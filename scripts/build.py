import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.preparing.build import build

run_step(snakemake, lambda: build(
    recipe=snakemake.params.recipe, material=snakemake.params.material,
    build_key=snakemake.wildcards.build_key, source_json=snakemake.input.source,
    provenance=snakemake.output.provenance, log=snakemake.log[0],
    jobs=snakemake.params.jobs or snakemake.threads, generator=snakemake.params.generator,
    ccache_dir=snakemake.params.ccache_dir, ccache_basedir=os.getcwd(),
    vendor_json=list(snakemake.input.vendor),
))
