"""Suites: what an ablation is (YAML → cells, each cell's resolved config, bundled suites, cost)."""
