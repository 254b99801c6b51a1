"""ladder: attribute llama.cpp CPU throughput to the build rung that bought it.

All logic lives here; the Snakemake rules and ``scripts/`` adapters only call into it.
"""

__version__ = "0.1.0"
