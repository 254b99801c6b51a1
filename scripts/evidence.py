import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.evidence import collect
from ladder.core.markers import Marker

rung = snakemake.params.rung
settings = snakemake.params.settings
run_step(snakemake, lambda: collect(
    rung=rung, markers=[Marker(**m) for m in rung["markers"]],
    provenance=snakemake.input.build, model_meta=snakemake.input.model,
    prompt=settings["prompt"], n_predict=settings["n_predict"], threads=snakemake.params.threads,
    timeout_s=settings["timeout_s"], out_json=snakemake.output.json,
    raw_log=snakemake.output.raw, env=rung["env"], common_args=rung["common_argv"],
))
