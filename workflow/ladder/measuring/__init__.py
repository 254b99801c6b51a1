"""Measuring: the bench rounds, serving experiments and load, dispatch counting, hotspots, kernel tests, quality, evidence."""
