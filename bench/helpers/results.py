"""Benchmark results as JSON under bench/results/ with their provenance, so RESULTS.md's tables are generated."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # bench/helpers/ -> the repository
RESULTS_DIR = ROOT / "bench" / "results"
PACKAGES = ("numpy", "scipy", "scikit-learn", "torch", "transformers", "onnxruntime", "faiss-cpu", "uvicorn")
_START_LOAD = os.getloadavg()  # benchmark scripts import this module first thing: the load they started under


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_facts(**extra) -> dict:
    """CPU count and model, memory, platform, Python, versions of the numeric packages; `extra` added as given."""
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or None,
    )
    mem_kb = next(
        (int(line.split()[1]) for line in _read("/proc/meminfo").splitlines() if line.startswith("MemTotal:")), None
    )
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gb": round(mem_kb / 2**20, 1) if mem_kb else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": packages,
        **extra,
    }


def git_state() -> dict:
    """Commit of the working tree and whether tracked files differ from it (nulls outside a git checkout)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def command_line() -> str:
    """This process's command line as typed from the repository root: `python -m bench.NAME ...` for a benchmark
    run as a module (how bench/ runs, bench/README.md), else the script's path."""
    argv = list(sys.argv)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.startswith("bench."):
        argv[:1] = ["-m", spec.name]
    else:
        try:
            argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
        except ValueError:
            pass
    python = ".venv/bin/python" if Path(sys.executable).parent.parent == ROOT / ".venv" else "python"
    return shlex.join([python, *argv])


def logged_commands(log: Path) -> list[str]:
    """Append this command to `log` (a JSON list kept beside a results file that accumulates over invocations,
    e.g. one variant per run) and return them all, for `save_result(command=...)`."""
    commands = json.loads(log.read_text()) if log.exists() else []
    if command_line() not in commands:
        commands.append(command_line())
        log.write_text(json.dumps(commands, indent=1) + "\n")
    return commands


def save_result(
    name: str,
    payload: dict,
    command: str | list[str] | None = None,
    machine: dict | None = None,
    benchmark: str | None = None,
    directory: Path = RESULTS_DIR,
) -> Path:
    """Write <directory>/<name>.json and return its path. The file is

    {"name": name, "benchmark": which renderer draws it (default: the running script's stem),
     "provenance": {"command": argv as typed (or a list, when the payload spans several invocations),
                    "date": UTC, "machine": machine_facts(**machine), "load_average": {"start", "end"},
                    "git_commit", "git_dirty"},
     "result": payload}
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    commands = command if isinstance(command, list) else [command or command_line()]
    provenance = {
        "command": commands[0] if len(commands) == 1 else commands,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_facts(**(machine or {})),
        "load_average": {"start": [round(x, 2) for x in _START_LOAD], "end": [round(x, 2) for x in os.getloadavg()]},
        **git_state(),
    }
    doc = {"name": name, "benchmark": benchmark or Path(sys.argv[0]).stem, "provenance": provenance, "result": payload}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False, default=_jsonable) + "\n")
    tmp.replace(path)
    print(f"result written to {path}", file=sys.stderr)
    return path


def _jsonable(value):
    """What json cannot write by itself: numpy scalars and arrays (tolist), anything else as its str."""
    return value.tolist() if hasattr(value, "tolist") else str(value)
