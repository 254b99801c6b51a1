"""Shared by every layer: errors, atomic files, paths, the machine, running a tool, code identity, parsers."""
