"""Package layout: the repository's top-level folders install under one import root, `xtag`.

`models/`, `training/`, `evaluation/`, `service/` and `cluster/` stay where they are in the checkout but become
`xtag.models`, `xtag.training`, `xtag.evaluation`, `xtag.service` and `xtag.cluster` (setuptools' package-dir mapping),
so nothing but `xtag` lands at the top of site-packages. The list of roots is pyproject.toml's
[tool.xtag] package-roots; everything else lives in pyproject.toml too.
"""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

ROOTS = tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["tool"]["xtag"]["package-roots"]

packages = ["xtag", *find_packages(include=["xtag.*"])]  # xtag/'s own subpackages (xtag.cli) are already named
for root in ROOTS:
    packages += [f"xtag.{root}", *(f"xtag.{root}.{sub}" for sub in find_packages(root))]
# service/dashboard holds the dashboard's files, no Python: named as a (data) package, as setuptools asks, so that it
# installs with its files and the build does not warn that an importable folder is missing from `packages`.
packages.append("xtag.service.dashboard")

setup(
    packages=packages,
    package_dir={"xtag": "xtag", **{f"xtag.{root}": root for root in ROOTS}},
    package_data={"xtag.service.dashboard": ["*"]},
)
