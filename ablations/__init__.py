"""The bundled ablation suites, installed as `flashprobe.ablations` (see setup.py).

`flashprobe suites` lists them; `flashprobe ablate --config NAME` finds one by name.
"""
