"""Experiments: computations behind the CLI commands (no printing)."""
