"""Analysing what was measured: statistics and the views of the serving and profiling results."""
