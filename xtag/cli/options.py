"""What the commands share: option declarations, the failure printer, config reading and log echoing.

Declared once here (as Annif's cli_util does) so that the same option reads the same in every command's
--help. Nothing here imports torch or xtag.training: `xtag predict` and `xtag evaluate` import this too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError

from xtag.models.errors import XtagError

BundleDir = Annotated[Path, typer.Argument(help="bundle directory")]
CorpusFormat = Annotated[
    str, typer.Option(help="corpus format: auto (from the file name) | jsonl | tsv | attentionxml")
]
SkipBadRows = Annotated[bool, typer.Option(help="skip malformed rows (and report how many) instead of failing")]
Progress = Annotated[bool, typer.Option(help="show progress bars")]
RayAddress = Annotated[
    str | None,
    typer.Option(
        help="run on a Ray cluster: HOST:PORT of its head | auto (RAY_ADDRESS, or the cluster `ray start` left "
        "here) | local (a Ray runtime started for this command); docs/ray.md"
    ),
]
Resume = Annotated[bool, typer.Option("--resume", help="with --ray: keep the shards a previous run finished")]
BeamSize = Annotated[
    int | None, typer.Option(min=1, help="beam width of the label-tree search (default: the bundle's)")
]
ExcludeSelf = Annotated[
    bool,
    typer.Option(
        "--exclude-self",
        help="a document whose id is a label's name never gets that label (debdeps: a package never depends on "
        "itself; the label-feature benchmarks' filter files)",
    ),
]
PropensityA = Annotated[float, typer.Option(help="Jain propensity A")]
PropensityB = Annotated[float, typer.Option(help="Jain propensity B")]


def fail(exc: Exception, name: Callable[[str], str] = str) -> NoReturn:
    """Print `error: ...` in red on stderr and exit 2 (or the error's own `exit_code`, for scripts that act on
    it); a pydantic error in one line, each field `name`d as the user sets it (a flag, an environment
    variable) rather than pydantic's multi-line dump with its URL."""
    message = one_line(exc, name) if isinstance(exc, ValidationError) else str(exc)
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(getattr(exc, "exit_code", 2))


@contextmanager
def failing(*errors: type[Exception], name: Callable[[str], str] = str) -> Iterator[None]:
    """Turn the user-caused `errors` (XtagError always) raised inside the block into `fail`."""
    try:
        yield
    except (XtagError, *errors) as exc:
        fail(exc, name)


_REWORDED = {"extra_forbidden": "no such setting"}  # pydantic's "Extra inputs are not permitted"


def one_line(exc: ValidationError, name: Callable[[str], str] = str) -> str:
    """Every error of `exc` as `option: message`, joined by '; ' (a model-level error has no option)."""
    parts = []
    for error in exc.errors(include_url=False):
        cause = (error.get("ctx") or {}).get("error")  # a validator's own exception: its message without prefix
        message = str(cause) if isinstance(cause, Exception) else _REWORDED.get(error["type"], error["msg"])
        path = ".".join(str(part) for part in error["loc"])
        parts.append(f"{name(path)}: {message}" if path else message)
    return "; ".join(parts)


def given_flags(ctx: typer.Context) -> dict[str, object]:
    """The options typed on the command line, by flag as typed ({"--max-leaf-size": 4}); defaults are left out,
    so an option never typed does not override a config file's setting."""
    # By name: typer ships its own copy of click, whose ParameterSource is not click's.
    typed = [p for p in ctx.command.params if getattr(ctx.get_parameter_source(p.name), "name", "") == "COMMANDLINE"]
    return {p.opts[0]: ctx.params[p.name] for p in typed}


def read_config(path: Path) -> dict:
    """A training config as JSON, or YAML (.yaml/.yml, needs PyYAML, which the train extra brings)."""
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise XtagError(f"{path}: not valid YAML ({exc})") from exc
    else:
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise XtagError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise XtagError(f"{path}: a config is a mapping of settings, not a {type(data).__name__}")
    return data


def setting_name(setting: str, flags: tuple[str, ...] = ()) -> str:
    """A refused setting as the user sets it: its variable, and its flag where the command has one."""
    group, _, field = setting.rpartition(".")  # limits.max_k: the variable names the field, not its group
    variable = field.upper() if group == "cluster" else f"XTAG_{field.upper()}"
    return f"invalid setting {variable}" + (f" (--{field})" if field in flags else "")


def service_settings():
    """The service's Settings (XTAG_* variables and .env), for the commands that load a bundle or open the
    feedback store as the server does; a bad variable fails in one line that names it."""
    from xtag.config.settings import Settings

    with failing(ValidationError, name=setting_name):
        return Settings()


def load_bundle_or_fail(bundle: Path):
    """The bundle at `bundle`, run as the settings say (XTAG_ENCODER_THREADS, ...), or `fail` naming what is wrong."""
    from xtag.models.bundle.loader import load_bundle

    options = service_settings().runtime_options()
    with failing():
        return load_bundle(bundle, options=options)


def finish(wrote: str, next_step: str | None = None) -> None:
    """A command's last line, for people (stderr, so stdout stays what scripts read): what it wrote where, and
    the command that usually comes next."""
    typer.echo(wrote + (f"; next: {next_step}" if next_step else ""), err=True)


def warn(message: str) -> None:
    """`warning: ...` in yellow on stderr: something the user should know, that does not stop the command."""
    typer.secho(f"warning: {message}", fg=typer.colors.YELLOW, err=True)


def read_noting_skips(corpus):
    """A corpus read with --skip-bad-rows, after saying which lines it left out (Corpus.skipped_note)."""
    if corpus.skipped:
        warn(corpus.skipped_note())
    return corpus


def echo_json(value: object, err: bool = False) -> None:
    typer.echo(json.dumps(value), err=err)


class _EchoHandler(logging.Handler):
    """Log records as `prefix: message` lines on stderr, through typer like every other line."""

    def __init__(self, prefix: str):
        super().__init__(logging.INFO)
        self.prefix = prefix

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"{self.prefix}: {record.getMessage()}", err=True)


@contextmanager
def echo_log(logger_name: str, prefix: str, enabled: bool) -> Iterator[None]:
    """Show one of xtag's step loggers on stderr for the duration of a command (nothing when not `enabled`)."""
    if not enabled:
        yield
        return
    logger, handler = logging.getLogger(logger_name), _EchoHandler(prefix)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # printed here once: a root handler (a library's basicConfig) must not repeat it
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def show_version(value: bool) -> None:
    """--version: the installed distribution's version (the one pip and the bundle manifests report)."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        typer.echo(f"xtag {version('xtag')}")
    except PackageNotFoundError:
        fail(XtagError("xtag is not installed (pip install -e .), so it has no version"))
    raise typer.Exit(0)
