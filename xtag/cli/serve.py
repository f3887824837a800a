"""`xtag serve`: a bundle over HTTP; the flags win over XTAG_* variables and .env (service/settings.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import fail, failing, setting_name
from xtag.models.errors import XtagError

Opt = typer.Option
FLAGS = ("host", "port", "workers", "device")  # the settings this command also takes as flags
DEVICE_HELP = (
    "cpu, cuda or cuda:N: where the ONNX encoder and FAISS indexes run (default: XTAG_DEVICE or cpu); CUDA that is "
    "not available is an error, never a CPU fallback"
)


def serve(
    bundle: Annotated[Path | None, typer.Argument(help="bundle directory (default: XTAG_BUNDLE)")] = None,
    host: Annotated[str | None, Opt(help="bind address (default: XTAG_HOST or 127.0.0.1)")] = None,
    port: Annotated[int | None, Opt(help="port (default: XTAG_PORT or 8000)")] = None,
    workers: Annotated[int | None, Opt(min=1, help="worker processes (default: XTAG_WORKERS or 1)")] = None,
    device: Annotated[str | None, Opt(help=DEVICE_HELP)] = None,
) -> None:
    """Serve a bundle over HTTP (FastAPI + uvicorn); other settings come from XTAG_* variables or .env."""
    from pydantic import ValidationError

    from xtag.service.server import serve as run_server

    if bundle is not None and not bundle.is_dir():
        fail(XtagError(f"{bundle}: bundle directory not found"))
    with failing(ValidationError, name=lambda setting: setting_name(setting, FLAGS)):
        run_server(bundle, host, port, workers, device=device)
