import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from ladder.core.adapter import run_step
from ladder.measuring.bench import Budget, grid_identity, measure, reconcile_block, reconcile_cell
from ladder.measuring.harness import Paths

w = snakemake.wildcards
run_step(snakemake, lambda: measure(
    reconcile_cell(w.quant, w.workload, snakemake.params.workload, snakemake.params.rungs,
                   snakemake.input.model),
    snakemake.params.rungs, reconcile_block(snakemake.params.measure),
    Paths(snakemake.input.model, snakemake.output.raw, snakemake.output.samples,
          snakemake.log[0]),
    identity=grid_identity(snakemake.params.rungs),
    own_cpus=snakemake.threads,
    budget=Budget(w.host, snakemake.resources.budget_s, snakemake.resources.budget_cells),
))
