"""Which xtag the tests import, whether it was installed with `pip install -e .` or a plain `pip install .`.

setup.py installs models/, training/, evaluation/ and service/ as xtag.models, ... (a package-dir mapping).
An editable install maps them onto this checkout. A plain install copies them into site-packages/xtag/, but
pytest puts the checkout first on sys.path, and its xtag/ folder (the CLI alone) hides the installed package:
"No module named xtag.models". So, before any test imports xtag, the installed package is imported from
site-packages, and PYTHONSAFEPATH keeps the subprocesses the tests start from the checkout (`python -m xtag`,
`python -c`) from putting it first again. The tests then test the installed copy: reinstall after an edit.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def outside_checkout(paths: list[str]) -> list[str]:
    return [p for p in paths if Path(p or ".").resolve() != ROOT]


@functools.cache
def editable_install() -> bool | None:
    """True for `pip install -e .`, False for a plain install, None when xtag is not installed at all. The
    checkout itself is not searched: a build leaves its own xtag.egg-info there, with no install behind it."""
    dist = next(metadata.distributions(name="xtag", path=outside_checkout(sys.path)), None)
    if dist is None:
        return None
    direct_url = dist.read_text("direct_url.json")
    return bool(direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"))


def use_installed_xtag() -> str:
    """Make `import xtag` mean the installed package; return one line saying which install the tests run on."""
    editable = editable_install()
    if editable is None:
        raise SystemExit(
            "tests: xtag is not installed in this Python; run `bash scripts/setup.sh` (or `pip install -e '.[train,dev]'`)"
        )
    if editable:
        return f"xtag: editable install of {ROOT}"
    kept = outside_checkout(sys.path)
    checkout = [p for p in sys.path if p not in kept]
    sys.path[:] = kept
    try:
        xtag = importlib.import_module("xtag")
    finally:
        sys.path[:0] = checkout
    os.environ["PYTHONSAFEPATH"] = "1"
    return f"xtag: installed copy at {Path(xtag.__file__).parent} (plain pip install: reinstall after editing the checkout)"


def checkout_last() -> None:
    """Under a plain install, move the checkout to the end of sys.path before each test (pytest puts it first
    whenever it imports a test package's __init__): a process a test spawns (multiprocessing hands it this
    sys.path) must import the installed xtag, not the checkout's CLI folder; `tests` still imports from it."""
    if editable_install() is False:
        kept = outside_checkout(sys.path)
        sys.path[:] = kept + [p for p in sys.path if p not in kept]


def pythonpath_for_subprocess(existing: str | None) -> str | None:
    """PYTHONPATH for a subprocess that runs the code under test: the checkout first under an editable install,
    and nothing more under a plain one, whose installed copy is the code under test (the checkout's xtag/ folder,
    the CLI alone, would hide it: "No module named xtag.models")."""
    if editable_install() is False:
        return existing
    return os.pathsep.join(filter(None, [str(ROOT), existing]))
