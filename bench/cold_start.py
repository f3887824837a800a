"""First `xtag train` and first `xtag serve` after install, with and without `xtag warm` (issue 28).

    .venv/bin/python -m bench.cold_start --data ../shared/data/debtags --name cold_start_debtags

A fresh install is stood in for by an empty NUMBA_CACHE_DIR (numba then finds no compiled kernel, as in a
fresh venv); the Python files and the corpus are in the OS page cache either way. Each step is its own
process, as a user runs it:
  cold train    empty cache, no `xtag warm` (what every install got before issue 28)
  warm step     `xtag warm` into a second empty cache (what scripts/setup.sh and the Dockerfiles now run)
  first train   that cache: the first train after install
  warm train    the same cache again: a train in a session that has trained before
and likewise cold / first / warm `xtag serve` until GET /ready answers 200, on the bundle of the warm train.
The round is repeated (--rounds), so each figure is a median over rounds run under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.helpers.results import ROOT, save_result
from bench.helpers.server import free_port, time_to_ready

XTAG = [sys.executable, "-m", "xtag"]


def _env(cache: Path) -> dict:
    return {**os.environ, "NUMBA_CACHE_DIR": str(cache)}


def _files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file())


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cache: Path) -> tuple[float, float, str]:
    """Wall and CPU seconds of one process (CPU time: what other sessions' load on the shared cores changes
    least), and its stdout."""
    cpu, start = _child_cpu(), time.perf_counter()
    done = subprocess.run(command, env=_env(cache), cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds, _child_cpu() - cpu, done.stdout


def train(corpus: Path, out: Path, cache: Path) -> dict:
    """One `xtag train` process: its wall time, and the model time it reports (features and tree included)."""
    shutil.rmtree(out, ignore_errors=True)
    before = _files(cache)
    seconds, cpu, stdout = timed([*XTAG, "train", "--corpus", str(corpus), "--out", str(out), "--no-progress"], cache)
    summary = json.loads(stdout.strip().splitlines()[-1])
    return {
        "wall_s": round(seconds, 2),
        "cpu_s": round(cpu, 2),
        "model_s": summary["model_seconds"],
        "total_s": summary["total_seconds"],
        "cache_files_added": _files(cache) - before,  # > 0: numba compiled something and saved it
    }


def serve_ready(bundle: Path, cache: Path, timeout: float = 300) -> dict:
    """time_to_ready of `xtag serve` with `cache` as numba's cache, and the numba files it added."""
    port, before = free_port(), _files(cache)
    ready, body = time_to_ready([*XTAG, "serve", str(bundle), "--port", str(port)], port, _env(cache), timeout)
    return {"ready_s": round(ready, 2), "warmup_ms": body.get("warmup_ms"), "cache_files_added": _files(cache) - before}


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def one_round(corpus: Path, work: Path, serve: bool) -> dict:
    """The steps of the module docstring once, each cache emptied first."""
    cold_cache, cache, run = fresh(work / "numba-cold"), fresh(work / "numba-installed"), work / "run"
    out = {"cold_train": train(corpus, run, cold_cache)}
    warm_s, warm_cpu, warm_out = timed([*XTAG, "warm"], cache)
    out["warm_step"] = {"wall_s": round(warm_s, 2), "cpu_s": round(warm_cpu, 2), "output": warm_out.strip()}
    out["first_train"] = train(corpus, run, cache)
    out["warm_train"] = train(corpus, run, cache)
    if serve:
        bundle = work / "bundle"
        timed([*XTAG, "export", str(run), "--out", str(bundle), "--overwrite"], cache)
        out["cold_serve"] = serve_ready(bundle, fresh(cold_cache))
        out["first_serve"] = serve_ready(bundle, cache)
        out["warm_serve"] = serve_ready(bundle, cache)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="corpus folder with train.jsonl.gz")
    ap.add_argument("--name", required=True, help="result name (bench/results/NAME.json)")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "cold_start")
    ap.add_argument("--rounds", type=int, default=3, help="repeat every step this often, interleaved (median)")
    ap.add_argument("--no-serve", action="store_true", help="only the train measurements (a corpus nobody serves)")
    args = ap.parse_args()
    rounds = []
    for r in range(args.rounds):
        rounds.append(one_round(args.data / "train.jsonl.gz", fresh(args.work), not args.no_serve))
        print(f"round {r + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    result = {
        "corpus": args.data.name,
        "stand_in_for_fresh_install": "an empty NUMBA_CACHE_DIR",
        "rounds": {step: [one[step] for one in rounds] for step in rounds[0]},
    }
    save_result(args.name, result)


if __name__ == "__main__":
    main()
