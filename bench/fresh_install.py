"""The first hour on a real fresh install (issue 28): a new venv, its first and second `xtag train` and `xtag serve`,
and PECOS's training on the same features, in one run.

    .venv/bin/python -m bench.fresh_install --data ../shared/data/debdeps \\
        --pecos bench/out/xlinear_vs_pecos_debdeps --name fresh_install_debdeps [--user xtaguser]

bench/cold_start.py stands in for a fresh install with an empty NUMBA_CACHE_DIR; this script builds one:
WORK/venv by `python -m venv`, this checkout installed into it by `pip install .` (not editable: the package
folder is the one a user gets; the dependencies come from the package index or pip's cache), then `xtag warm`
as scripts/setup.sh runs it. With --user, every step after the install runs as that user (runuser), who
cannot write the venv: as in the Docker image, the kernels then live in a NUMBA_CACHE_DIR that user owns and
warmed (the image runs `xtag warm --serve-only`; here the full `xtag warm`, since training is measured too).
Without --user the kernels are cached in the venv's package folder, as after scripts/setup.sh.

Steps, each its own process: install; warm; first train; second train; PECOS's training (bench/.venv-pecos,
the --pecos workdir's matrices: the same TF-IDF); export; first serve; second serve (until GET /ready
answers 200). The rankers' time comparable with PECOS's train_s (PIFA, tree and rankers, no features) is
xtag's model time less its TF-IDF fit (the run's `features` event).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.helpers.results import ROOT, save_result
from bench.helpers.server import free_port, time_to_ready

PECOS_PY = ROOT / "bench" / ".venv-pecos" / "bin" / "python"


class Install:
    """The fresh venv, and how its commands run (as which user, with which kernel cache)."""

    def __init__(self, work: Path, user: str | None, python: Path):
        self.work, self.user, self.python = work, user, python
        self.venv = work / "venv"
        self.home = work / "home"  # runs, bundle and (with --user) the kernel cache: the user's
        self.cache = self.home / "numba" if user else None

    def env(self) -> dict:
        env = {"PATH": f"{self.venv / 'bin'}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        return env | ({"NUMBA_CACHE_DIR": str(self.cache)} if self.cache else {})

    def command(self, *args: str) -> list[str]:
        """`xtag ARGS` in this install's environment (runuser would reset HOME, hence `env` after it)."""
        run = ["env", "-i", *(f"{k}={v}" for k, v in self.env().items()), str(self.venv / "bin" / "xtag"), *args]
        return ["runuser", "-u", self.user, "--", *run] if self.user else run

    def kernel_files(self) -> int:
        """Compiled-kernel files in numba's cache (a new one: something was compiled)."""
        where = self.cache or self.venv
        return sum(1 for p in where.rglob("*.nbc")) if where.exists() else 0


def timed(command: list[str], cwd: Path | None = None) -> dict:
    start, cpu = time.perf_counter(), _child_cpu()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {"wall_s": round(time.perf_counter() - start, 2), "cpu_s": round(_child_cpu() - cpu, 2)}


def _child_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def install(inst: Install) -> dict:
    """`python -m venv` and `pip install .` of this checkout, as root or whoever runs this script."""
    shutil.rmtree(inst.work, ignore_errors=True)
    inst.home.mkdir(parents=True)
    inst.work.chmod(0o755)
    created = timed([str(inst.python), "-m", "venv", str(inst.venv)])
    pip = [str(inst.venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    installed = timed([*pip, str(ROOT)], cwd=inst.work)
    if inst.user:
        subprocess.run(["chown", "-R", inst.user, str(inst.home)], check=True)
    return {"venv_s": created["wall_s"], "pip_install_s": installed["wall_s"]}


def train(inst: Install, corpus: Path, out: Path) -> dict:
    before = inst.kernel_files()
    step = timed(inst.command("train", "--corpus", str(corpus), "--out", str(out), "--no-progress"))
    summary = json.loads((out / "summary.json").read_text())
    events = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    features_s = next(e["seconds"] for e in events if e.get("event") == "features")
    return {
        **step,
        "model_s": summary["model_seconds"],
        "rankers_s": round(summary["model_seconds"] - features_s, 3),  # PIFA, tree and rankers: PECOS's train_s
        "kernel_files_added": inst.kernel_files() - before,
    }


def serve_ready(inst: Install, bundle: Path) -> dict:
    before, port = inst.kernel_files(), free_port()
    ready, _ = time_to_ready(inst.command("serve", str(bundle), "--port", str(port)), port)
    return {"ready_s": round(ready, 2), "kernel_files_added": inst.kernel_files() - before}


def pecos_train(workdir: Path) -> float:
    """PECOS's training seconds (PIFA + tree + rankers) on the workdir's matrices (bench/peers/pecos_xlinear.py)."""
    subprocess.run(
        [
            str(PECOS_PY),
            "-m",
            "bench.peers.pecos_xlinear",
            "--workdir",
            str(workdir),
            "--threads",
            "2",
            "--repeats",
            "1",
        ],
        check=True,
    )
    return json.loads((workdir / "pecos_result.json").read_text())["train_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="corpus folder with train.jsonl.gz")
    ap.add_argument("--pecos", type=Path, required=True, help="a bench/xlinear_vs_pecos.py workdir of the same corpus")
    ap.add_argument("--name", required=True, help="result name (bench/results/NAME.json)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/xtag_fresh_install"), help="emptied first")
    ap.add_argument("--user", help="run every step after the install as this (non-root) user")
    ap.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="the interpreter the venv is made from (with --user: one that user can run, e.g. /usr/bin/python3)",
    )
    args = ap.parse_args()
    inst = Install(args.work.resolve(), args.user, args.python)
    corpus = (args.data / "train.jsonl.gz").resolve()
    out: dict = {"corpus": args.data.name, "user": args.user or "the installing user", "python": str(args.python)}
    out["install"] = install(inst)
    print(f"installed: {out['install']}", file=sys.stderr, flush=True)
    before = inst.kernel_files()
    out["warm"] = {**timed(inst.command("warm")), "kernel_files_added": inst.kernel_files() - before}
    run = inst.home / "run"
    out["first_train"] = train(inst, corpus, run)
    shutil.rmtree(run)
    out["second_train"] = train(inst, corpus, run)
    out["pecos_train_s"] = pecos_train(args.pecos)
    bundle = inst.home / "bundle"
    timed(inst.command("export", str(run), "--out", str(bundle)))
    out["first_serve"] = serve_ready(inst, bundle)
    out["second_serve"] = serve_ready(inst, bundle)
    first, second = out["first_train"], out["second_train"]
    out["ratios"] = {
        "first / second train (process)": first["wall_s"] / second["wall_s"],
        "first / second train (model)": first["model_s"] / second["model_s"],
        "first train rankers / PECOS train": first["rankers_s"] / out["pecos_train_s"],
        "second train rankers / PECOS train": second["rankers_s"] / out["pecos_train_s"],
    }
    print(json.dumps(out, indent=1), file=sys.stderr)
    save_result(args.name, out)


if __name__ == "__main__":
    main()
