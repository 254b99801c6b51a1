import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.quality import fetch_corpus

run_step(snakemake, lambda: fetch_corpus(snakemake.params.spec, dest=snakemake.output.txt,
                                         meta_out=snakemake.output.meta))
