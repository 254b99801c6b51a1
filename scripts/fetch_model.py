import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.preparing.model import fetch, model_file

run_step(snakemake, lambda: fetch(snakemake.wildcards.model, snakemake.params.spec,
                                  dest=model_file(snakemake.output.meta, snakemake.wildcards.model), meta_out=snakemake.output.meta,
                                  site_dir=snakemake.params.site,
                                  parent_meta=snakemake.input.get("parent")))
