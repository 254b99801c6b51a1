"""Preparing the inputs: llama.cpp sources, vendor libraries, builds, recipes, models, the emulated lane."""
