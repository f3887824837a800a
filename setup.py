"""Package layout: the repository's top-level folders install under one import root, `xtag`.

`corpus/`, `models/`, `config/`, `training/`, `evaluation/`, `service/` and `cluster/` stay where they are in the
checkout but become `xtag.corpus`, `xtag.models`, `xtag.config`, ... (setuptools' package-dir mapping),
so nothing but `xtag` lands at the top of site-packages. The list of roots is pyproject.toml's
[tool.xtag] package-roots; everything else lives in pyproject.toml too.
"""

import tomllib
import warnings
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.warnings import InformationOnly

# An editable install of folders mapped under another name (models/ -> xtag.models) can only be made by setuptools'
# import-hook strategy, which always ends with an InformationOnly notice, "Editable installation ... be careful with
# folders in your working directory with the same name as your package". pip (24.1+) reprints each backend warning
# as a 10-line BuildBackendWarning, the first thing a new user saw. It is information about the mapping chosen here,
# not a fault: that one notice is not raised (every other warning still is).
warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

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
