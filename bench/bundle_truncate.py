"""A bundle file cut short under a running server (issue 47, defect 3), before and after the private copy, and what
each way of holding a bundle's arrays costs at load.

Part 1, per side (--before-python: an interpreter whose `xtag` is the older code, e.g. main's virtualenv; then this
checkout's): serve a fresh copy of --bundle with `xtag serve` on 127.0.0.1, send --requests single-text
predictions, `truncate -s 128` the bundle's largest engine array (--file to choose another), then send up to
--requests more (at most --seconds) and record whether the process lives (its exit status if not: -7 is SIGBUS),
how many answers were 200, what /ready says, and the seconds from spawn to /ready.

Part 2, in fresh processes, one per way: load --bundle and predict --requests texts with the engine arrays (a)
mapped in place (the older code), (b) copied into a private read-only folder and mapped there (this code), (c) read
into anonymous memory (no mapping at all); two processes each (a server's two workers), one after the other, then
their load seconds and /proc/PID/smaps_rollup: the first's RSS and private MB, and both processes' PSS together.

    .venv/bin/python -m bench.bundle_truncate --bundle bundles/debdeps-xl --test data/debdeps/test.jsonl.gz \\
        --before-python /work/main/.venv/bin/python --result-name bundle_truncate_debdeps
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.helpers.results import save_result

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rollup(pid: int | str = "self") -> dict[str, float]:
    """MB of RSS, PSS, private and shared pages of a process (/proc/PID/smaps_rollup)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0]) / 1024
    return {
        "rss_mb": round(fields["Rss"], 1),
        "pss_mb": round(fields["Pss"], 1),
        "private_mb": round(fields["Private_Clean"] + fields["Private_Dirty"], 1),
        "shared_mb": round(fields["Shared_Clean"] + fields["Shared_Dirty"], 1),
    }


def serve_and_truncate(python: str, bundle: Path, rel: str, texts: list[str], args, work: Path) -> dict:
    copy = shutil.copytree(bundle, work / bundle.name)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("XTAG_")}
    env.update(XTAG_LOG_LEVEL="warning", XTAG_SNAPSHOT_DIR=str(work / "copies"))
    log = work / "serve.log"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "xtag", "serve", str(copy), "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=work,
        stderr=log.open("w"),
        stdout=subprocess.DEVNULL,
    )
    out: dict = {}
    try:
        with httpx.Client(timeout=30) as client:
            while time.perf_counter() - start < 600:
                if proc.poll() is not None:
                    raise SystemExit(f"{python}: the server exited before it was ready:\n{log.read_text()[-2000:]}")
                try:
                    if client.get(url + "/ready").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            out["ready_s"] = round(time.perf_counter() - start, 2)
            out["memory_after_load"] = rollup(proc.pid)

            def send(n: int) -> tuple[int, int]:
                ok = failed = 0
                deadline = time.perf_counter() + args.seconds
                for i in range(n):
                    if time.perf_counter() > deadline or proc.poll() is not None:
                        break
                    try:
                        r = client.post(url + "/v1/predict", json={"text": texts[i % len(texts)], "k": 10})
                        ok += r.status_code == 200
                        failed += r.status_code != 200
                    except httpx.HTTPError:
                        failed += 1
                return ok, failed

            out["before_truncate"] = dict(zip(("ok", "failed"), send(args.requests)))
            os.truncate(copy / rel, 128)
            out["after_truncate"] = dict(zip(("ok", "failed"), send(args.requests)))
            time.sleep(0.5)
            out["exit_status"] = proc.poll()  # None: alive
            if out["exit_status"] is None:
                r = client.get(url + "/ready")
                out["ready_after"] = {"status": r.status_code, "detail": r.json().get("detail")}
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
    out["log_lines"] = len([line for line in log.read_text().splitlines() if line.strip()])
    return out


HOLD = """
import json, sys, time
import numpy as np
from pathlib import Path
import xtag.models.engine.layout as layout
from xtag.models.bundle.loader import load_bundle
from xtag.models.bundle.snapshot import server_root, take_snapshot
way, bundle, work, texts = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), json.loads(sys.argv[4])
if way == "read into memory":
    layout._mapped = lambda path: np.load(path, allow_pickle=False)
start = time.perf_counter()
if way == "private copy, mapped":
    bundle = take_snapshot(bundle, server_root(work / "copies", 1)).copy  # the workers' shared copy
copied = time.perf_counter() - start
b = load_bundle(bundle)
seconds = time.perf_counter() - start
b.predictor.predict(texts, k=10)
print(json.dumps({"load_s": round(seconds, 2), "copy_s": round(copied, 2)}), flush=True)
sys.stdin.read()  # held until the parent has read its memory
"""


def hold(way: str, bundle: Path, texts: list[str], work: Path, workers: int = 2) -> dict:
    """`workers` fresh processes load and predict one after the other (as a server's workers start), then hold
    the bundle while their memory is read: load seconds of the first, its RSS and private MB, and the PSS of all
    (what they cost together: pages two processes map count half to each)."""
    procs, loads, copies = [], [], []
    for _ in range(workers):
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, way, str(bundle), str(work), json.dumps(texts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = json.loads(proc.stdout.readline())
        loads.append(line["load_s"])
        copies.append(line["copy_s"])
        procs.append(proc)
    memory = [rollup(p.pid) for p in procs]
    for proc in procs:
        proc.communicate("", timeout=60)
    return {
        "load_s": loads,
        "copy_s": copies,  # of load_s: the copy (the second worker finds the first's)
        "rss_mb": memory[0]["rss_mb"],
        "private_mb": memory[0]["private_mb"],
        "pss_mb_all": round(sum(m["pss_mb"] for m in memory), 1),
        "workers": workers,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True, help="texts to send (the first --requests)")
    ap.add_argument("--before-python", required=True, help="an interpreter whose xtag is the older code")
    ap.add_argument("--file", help="the bundle file to truncate (default: the largest rankers/engine array)")
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0, help="at most this long per request loop")
    ap.add_argument("--result-name", default="bundle_truncate")
    args = ap.parse_args()
    from xtag.corpus.files import load_corpus

    texts = list(load_corpus(args.test).texts[: args.requests])
    engine = args.bundle / "rankers" / "engine"
    rel = args.file or str(max(engine.glob("*.npy"), key=lambda p: p.stat().st_size).relative_to(args.bundle))
    sides, ways = {}, {}
    for side, python in (("before", args.before_python), ("after", sys.executable)):
        with tempfile.TemporaryDirectory(prefix="xtag-truncate-") as work:
            sides[side] = serve_and_truncate(python, args.bundle, rel, texts, args, Path(work))
        print(side, json.dumps(sides[side]), flush=True)
    for way in ("mapped in place", "private copy, mapped", "read into memory"):
        with tempfile.TemporaryDirectory(prefix="xtag-hold-") as work:
            ways[way] = hold(way, args.bundle, texts, Path(work))
        print(way, json.dumps(ways[way]), flush=True)
    size = sum(f.stat().st_size for f in args.bundle.rglob("*") if f.is_file())
    payload = {
        "bundle": args.bundle.name,
        "bundle_mb": round(size / 2**20, 1),
        "truncated": rel,
        "requests": args.requests,
        "sides": sides,
        "ways": ways,
    }
    save_result(args.result_name, payload, benchmark="bundle_truncate")


if __name__ == "__main__":
    main()
