"""What every family's exporter shares: logged slow steps, quiet transformers, the run's model folder as a start.

Kept apart from training/export/export_run.py (the run → bundle orchestrator) so the ONNX passes and the families'
exporters can use the step logger without importing the orchestrator that calls them.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("xtag.export")


@contextmanager
def step(what: str) -> Iterator[None]:
    """Log a slow export step when it starts and what it took: a transformer export runs for a minute,
    and `xtag export` (which shows this logger) should say what it is doing meanwhile."""
    log.info("%s ...", what)
    start = time.perf_counter()
    yield
    log.info("%s: done in %.1f s", what, time.perf_counter() - start)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hugging Face's info/warning chatter (weights loading, deprecations) off for the duration; only for
    families that bring transformers, so an XR-Linear export never imports it."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def copy_run_model(run_model: Path, tmp: Path, leave_out: tuple[str, ...] = ()) -> None:
    """The run's model folder as the bundle's start, without the top-level entries in `leave_out`
    (the torch encoder the bundle replaces by ONNX, or features the bundle does not read)."""
    shutil.copytree(run_model, tmp, ignore=lambda folder, names: list(leave_out) if Path(folder) == run_model else [])
