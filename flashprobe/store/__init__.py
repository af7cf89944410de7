"""The result store on disk: one folder per cell, written by the runner, read by the analysis."""
