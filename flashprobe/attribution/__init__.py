"""Attribution: which kernel component explains a divergence (replay, mechanisms, ranking)."""
