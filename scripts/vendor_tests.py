import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.vendor_tests import run_suite

run_step(snakemake, lambda: run_suite(
    rung=snakemake.params.rung, provenance=snakemake.input.build,
    resources_dir=snakemake.params.resources_dir, out_json=snakemake.output.json,
    raw_dir=snakemake.output.raw, log=snakemake.log[0], shards=snakemake.threads,
    # the compile may use every CPU this job can reach: an emulated host's job reserves one
    # core (its tests run one process per core it has), and nothing it shares them with is timed
    jobs=snakemake.params.jobs or len(os.sched_getaffinity(0)),
    timeout_s=float(snakemake.params.timeout_s), ccache_dir=snakemake.params.ccache_dir,
))
