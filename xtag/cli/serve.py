"""`xtag serve`: one or more bundles over HTTP; the flags win over XTAG_* variables and .env (config/settings.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from xtag.cli.options import failing, setting_name

Opt = typer.Option
FLAGS = ("host", "port", "workers", "device", "models_file", "default_model", "bundle_root")  # also settings
DEVICE_HELP = (
    "cpu, cuda or cuda:N: where the ONNX encoder and FAISS indexes run (default: XTAG_DEVICE or cpu); CUDA that is "
    "not available is an error, never a CPU fallback"
)


def serve(
    bundles: Annotated[
        list[Path] | None,
        typer.Argument(help="bundle directories, each served under its directory's name (default: XTAG_BUNDLE)"),
    ] = None,
    model: Annotated[
        list[str] | None, Opt(help="NAME=PATH: also serve the bundle PATH as model NAME (repeatable; XTAG_MODELS)")
    ] = None,
    models_file: Annotated[
        Path | None, Opt(help="a models.toml naming the models (default: XTAG_MODELS_FILE, or BUNDLE_ROOT/models.toml)")
    ] = None,
    all_bundles: Annotated[
        bool, Opt("--all", help="also serve every bundle under --bundle-root (XTAG_BUNDLE_ROOT)")
    ] = False,
    bundle_root: Annotated[
        Path | None, Opt(help="the bundle directory: --all, models.toml and HTTP loads (default: XTAG_BUNDLE_ROOT)")
    ] = None,
    default: Annotated[
        str | None, Opt(help="the model /v1/predict answers (default: XTAG_DEFAULT_MODEL, or the first)")
    ] = None,
    shadow: Annotated[
        list[str] | None, Opt(help="NEW=OLD: model NEW shadows model OLD (repeatable; XTAG_SHADOW)")
    ] = None,
    host: Annotated[str | None, Opt(help="bind address (default: XTAG_HOST or 127.0.0.1)")] = None,
    port: Annotated[int | None, Opt(help="port (default: XTAG_PORT or 8000)")] = None,
    workers: Annotated[int | None, Opt(min=1, help="worker processes (default: XTAG_WORKERS or 1)")] = None,
    device: Annotated[str | None, Opt(help=DEVICE_HELP)] = None,
) -> None:
    """Serve bundles over HTTP (FastAPI + uvicorn); other settings come from XTAG_* variables or .env."""
    from pydantic import ValidationError

    from xtag.config.model_set import bundle_name
    from xtag.service.server import serve as run_server

    bundles = bundles or []  # each model's path is checked before anything binds (service/server.py)
    named = [f"{bundle_name(b)}={b}" for b in bundles[1:]] + list(model or [])
    overrides = {
        "models": ",".join(named) or None,
        "models_file": models_file,
        "all_bundles": all_bundles or None,
        "bundle_root": bundle_root,
        "default_model": default,
        "shadow": ",".join(shadow or []) or None,
    }
    with failing(ValidationError, name=lambda setting: setting_name(setting, FLAGS)):
        run_server(bundles[0] if bundles else None, host, port, workers, device=device, **overrides)
