"""Standalone probes: the rounding bias on synthetic rows (`bias`) and kernel timings (`bench`)."""
