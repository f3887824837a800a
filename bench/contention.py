"""Training and serving beside one CPU-bound competitor (issue 47, defect 8), before and after, in one run.

    .venv/bin/python -m bench.contention --before-checkout /work/main --result-name contention_debtags

Three workloads on debtags (the repository's data/debtags/train.jsonl.gz, cut by a seeded shuffle): LaMP training
(its optimiser steps per second, from the run's `step` events; the run is stopped after --lamp-steps steps or
--lamp-seconds seconds of stepping), XR-Linear training (documents per second of its model fit, on --xl-docs
texts) and serving (`POST /v1/predict` p50, one client, one text, k=5, --requests requests, on an XR-Linear
bundle). Each runs in a child process, quiet and beside one competitor (`python -c 'while True: pass'`, started
before and killed after the measure), with two codes: "before", another checkout's code (a folder holding an
`xtag` package linked to it, as service_load.py's --server-code), and "after", this checkout. The codes and the
two conditions take turns within each of --rounds rounds, so that the shared machine's drifting load falls on
all alike (one unmeasured XR-Linear training per code first compiles the trainer's kernels into numba's cache);
the table gives the medians over rounds and each workload's kept share (with the competitor / quiet).
Each code's pool sizes are read by a child that imports it (torch, numba, OpenMP and BLAS pools, the wait
policy, the service's predictor calls, onnxruntime's intra-op threads for an encoder bundle).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.helpers.results import save_result

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = ("lamp", "xlinear", "serve")
CONDITIONS = ("quiet", "competitor")

# A child reports the pools of the code it imported (either code: nothing here names the new module).
POOLS_CODE = r"""
import json, os, sys
wait = os.environ.get("OMP_WAIT_POLICY")
import xtag
import xtag.models
import numba, torch, faiss, onnxruntime
from threadpoolctl import threadpool_info
from xtag.service.app import predictor_calls
from xtag.config.settings import Settings
# which code: a module missing from the linked checkout would be found in this one's editable install instead
if os.path.exists(os.path.join(xtag.models.__path__[0], "threads.py")):
    from xtag.models.threads import apply, thread_count
    apply()
    trainer = encoder = thread_count()
else:  # the code before: the trainer's executors from the affinity mask, onnxruntime its own default
    from xtag.training.threads import cpu_count
    trainer, encoder = cpu_count(), f"0 (onnxruntime's default: {os.cpu_count()} host cores)"
out = {
    "OMP_WAIT_POLICY at start": wait or "unset",
    "torch_intra_op": torch.get_num_threads(),
    "torch_inter_op": torch.get_num_interop_threads(),
    "numba_pool": numba.config.NUMBA_NUM_THREADS,
    "xlinear_trainer_workers": trainer,
    "service_predictor_calls": predictor_calls(Settings()),
    "onnxruntime_intra_op": encoder,
    "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "unset (GNU OpenMP spins)"),
    "xtag.models": xtag.models.__path__[0],
}
for info in threadpool_info():
    out[info["internal_api"] + ":" + os.path.basename(info["filepath"])] = info["num_threads"]
print(json.dumps(out))
"""

TRAIN_CODE = r"""
import json, sys
from pathlib import Path
from xtag.training.config import TrainConfig
from xtag.training.run import train_run
config = TrainConfig.model_validate_json(sys.argv[1])
train_run(config, Path(sys.argv[2]), progress=False)
"""


def code_folder(checkout: Path, dest: Path) -> Path:
    """dest/xtag: the checkout's packages linked under one `xtag` folder (the setup.py layout); returns dest."""
    pkg = dest / "xtag"
    pkg.mkdir(parents=True, exist_ok=True)
    links = {p.name: p for p in (checkout / "xtag").iterdir() if p.name != "__pycache__"}
    links.update({r: checkout / r for r in ("models", "training", "evaluation", "service", "cluster")})
    for name, target in links.items():
        link = pkg / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dest


def child_env(code: Path | None, work: Path) -> dict:
    """A child's environment: no thread variables (each code sizes its own pools), its code first on the path.
    Children run in `work`: `python -c` puts the working directory first, and the checkout's root holds `xtag/`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "KMP_", "MKL_", "OPENBLAS_", "NUMBA_NUM"))}
    env.pop("XTAG_THREADS", None)  # each code's own default sizing is what is compared
    env["NUMBA_CACHE_DIR"] = str(work / "numba_cache")  # compiled kernels kept here, not in the checkouts
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return env


class Competitor:
    """One CPU-bound process for the time of a `with` block (none when `on` is false)."""

    def __init__(self, on: bool) -> None:
        self.on, self.proc = on, None

    def __enter__(self):
        if self.on:
            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(0.3)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def step_rate(log: Path) -> tuple[float | None, int]:
    """Optimiser steps per second between the first and last `step` events of a run log, and the last step."""
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    steps = [(e["time"], e["step"]) for e in events if e.get("event") == "step"]
    if len(steps) < 2:
        return None, steps[-1][1] if steps else 0
    (t0, s0), (t1, s1) = steps[0], steps[-1]
    return (s1 - s0) / max(t1 - t0, 1e-9), s1


def lamp_run(config: dict, out: Path, env: dict, competitor: bool, steps: int, seconds: float) -> dict:
    """LaMP trains in a child until --lamp-steps steps or --lamp-seconds of stepping, then is stopped."""
    log = out / "train_log.jsonl"
    with Competitor(competitor):
        proc = subprocess.Popen(
            [sys.executable, "-c", TRAIN_CODE, json.dumps(config), str(out)], env=env, cwd=out.parent
        )
        first, deadline = None, time.time() + 600  # the setup (candidates, token states) is bounded too
        try:
            while proc.poll() is None and time.time() < deadline:
                time.sleep(0.5)
                rate, last = step_rate(log)
                first = first or (time.time() if last else None)
                if last >= steps or (first and time.time() - first > seconds):
                    break
        finally:
            proc.kill()
            proc.wait()
    rate, last = step_rate(log)
    return {"steps_per_s": rate, "steps": last}


def xlinear_run(config: dict, out: Path, env: dict, competitor: bool, docs: int) -> dict:
    with Competitor(competitor):
        subprocess.run(
            [sys.executable, "-c", TRAIN_CODE, json.dumps(config), str(out)], env=env, cwd=out.parent, check=True
        )
    summary = json.loads((out / "summary.json").read_text())
    return {"docs_per_s": docs / summary["model_seconds"], "model_seconds": summary["model_seconds"]}


def serve_run(bundle: Path, code: Path | None, env: dict, competitor: bool, bodies: list[bytes]) -> dict:
    from service_latency import _clients, free_port, ms, start_server

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)  # start_server passes os.environ on
    try:
        port = free_port()
        server = start_server(bundle, port, "on", code_dir=code)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        asyncio.run(_clients(port, bodies[:20], 1, "/v1/predict"))  # warm
        with Competitor(competitor):
            times, _ = asyncio.run(_clients(port, bodies, 1, "/v1/predict"))
        return {"p50_ms": ms(times, 50), "p90_ms": ms(times, 90)}
    finally:
        server.terminate()
        server.wait(timeout=30)


def prepare(args: argparse.Namespace, work: Path) -> tuple[Path, Path, Path]:
    """The LaMP part, the XR-Linear timing part and the first-stage bundle (trained and exported once)."""
    from lamp_debtags import split, train_export
    from xtag.training.config import TrainConfig

    first, lamp, _ = split(args.train, work, (args.lamp_fraction, 0.0), 0)
    xl = work / "xl.jsonl"
    xl.write_text("\n".join(first.read_text().splitlines()[: args.xl_docs]) + "\n")
    bundle, _ = train_export(TrainConfig(corpus=first), work / "first_stage")
    return lamp, xl, bundle


def measure(args, work: Path, codes: dict, workloads: list[str], inputs: tuple) -> tuple[dict, list[float]]:
    """Every workload with every code, quiet and beside the competitor, in turn within each round."""
    lamp_cfg, xl_cfg, bundle, bodies = inputs
    if "xlinear" in workloads:  # numba compiles the trainer's kernels into the cache once per code, unmeasured
        for name, code in codes.items():
            shutil.rmtree(work / "runs" / f"warm-{name}", ignore_errors=True)
            (work / "runs").mkdir(parents=True, exist_ok=True)
            xlinear_run(xl_cfg, work / "runs" / f"warm-{name}", child_env(code, work), False, args.xl_docs)
    runs: dict = {w: {c: {k: [] for k in CONDITIONS} for c in codes} for w in workloads}
    loads = []
    for r in range(args.rounds):
        for w in workloads:
            for name, code in codes.items():
                for cond in CONDITIONS:
                    env, out = child_env(code, work), work / "runs" / f"{w}-{name}-{cond}-{r}"
                    if out.exists():
                        shutil.rmtree(out)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    load = os.getloadavg()[0]
                    if w == "lamp":
                        got = lamp_run(lamp_cfg, out, env, cond == "competitor", args.lamp_steps, args.lamp_seconds)
                    elif w == "xlinear":
                        got = xlinear_run(xl_cfg, out, env, cond == "competitor", args.xl_docs)
                    else:
                        got = serve_run(bundle, code, env, cond == "competitor", bodies)
                    got["load_before"] = round(load, 2)
                    loads.append(load)
                    runs[w][name][cond].append(got)
                    print(r, w, name, cond, got, flush=True)
    return runs, loads


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before-checkout", type=Path, required=True, help="the checkout whose code is 'before'")
    ap.add_argument("--train", type=Path, default=ROOT / "data" / "debtags" / "train.jsonl.gz")
    ap.add_argument("--test", type=Path, default=ROOT / "data" / "debtags" / "test.jsonl.gz")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "contention")
    ap.add_argument("--lamp-fraction", type=float, default=0.05)
    ap.add_argument("--lamp-steps", type=int, default=200)
    ap.add_argument("--lamp-seconds", type=float, default=40.0)
    ap.add_argument("--xl-docs", type=int, default=4000)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--result-name", default=None)
    args = ap.parse_args()
    from xtag.corpus.files import load_corpus

    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    lamp_corpus, xl_corpus, bundle = prepare(args, work)
    codes = {"before": code_folder(args.before_checkout.resolve(), work / "before_code"), "after": None}
    commit = subprocess.run(
        ["git", "-C", str(args.before_checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    pools = {}
    for name, code in codes.items():
        done = subprocess.run(
            [sys.executable, "-c", POOLS_CODE],
            env=child_env(code, work),
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        )
        pools[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(pools, indent=1), flush=True)
    texts = load_corpus(args.test).texts[: args.requests]
    bodies = [json.dumps({"text": t, "k": 5}).encode() for t in texts]
    lamp_cfg = {
        "corpus": str(lamp_corpus),
        "model": "lamp",
        "lamp": {
            "first_stage": str(bundle),
            "cross_fit": 0,
            "device": "cpu",
            "epochs": 10,
            "max_steps": args.lamp_steps,
            "log_every": 2,
            "checkpoint_every": 100000,
        },
    }
    xl_cfg = {"corpus": str(xl_corpus)}
    workloads = args.workloads.split(",")
    runs, loads = measure(args, work, codes, workloads, (lamp_cfg, xl_cfg, bundle, bodies))
    metric = {"lamp": "steps_per_s", "xlinear": "docs_per_s", "serve": "p50_ms"}
    summary = {}
    for w in workloads:
        for name in codes:
            med = {
                c: float(np.median([x[metric[w]] for x in runs[w][name][c] if x[metric[w]] is not None] or [np.nan]))
                for c in CONDITIONS
            }
            # kept share: throughput with the competitor over quiet; for a latency, quiet over with the competitor
            kept = med["competitor"] / med["quiet"] if w != "serve" else med["quiet"] / med["competitor"]
            summary[f"{w}/{name}"] = {"metric": metric[w], **med, "kept": round(kept, 3)}
    result = {
        "before_commit": commit,
        "lamp_corpus_docs": len(lamp_corpus.read_text().splitlines()),
        "xl_docs": args.xl_docs,
        "requests": args.requests,
        "rounds": args.rounds,
        "pools": pools,
        "summary": summary,
        "runs": runs,
        "load_during": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
    }
    print(json.dumps(summary, indent=1))
    if args.result_name:
        save_result(args.result_name, result)


if __name__ == "__main__":
    main()
