import os
import sys

sys.path.insert(0, os.path.join(snakemake.scriptdir, "..", "workflow"))  # the ladder package
from pathlib import Path

from ladder.core.adapter import run_step
from ladder.preparing.source import fetch

out = Path(snakemake.output.json)
base = list(snakemake.input.base)  # a patched source's base record; none otherwise
run_step(snakemake, lambda: fetch(snakemake.params.source, workdir=out.parent,
                                  downloads=Path(snakemake.params.downloads), out_json=out,
                                  base_json=Path(base[0]) if base else None))
