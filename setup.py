"""Package layout (metadata is in pyproject.toml): the suites in the top-level ablations/ folder
ship inside the package as flashprobe.ablations, in editable and wheel installs alike."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["flashprobe", "flashprobe.*"]), "flashprobe.ablations"],
    package_dir={"flashprobe.ablations": "ablations"},
)
