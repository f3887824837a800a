"""The automatic rollout under load (issue 50): a healthy canary stepped up and promoted on its own, then a slow
canary and a failing one rolled back on their own, under keep-alive clients, on debtags.

One server on loopback serves model `debtags` with four versions of the same XR-Linear bundle (ROOT/debtags/1..4,
models.toml: stable 1). The faults are injected by this script, not by the product: the server process it starts
wraps ServedModel.predict so that version 3 answers --slow-ms late and version 4 raises (its requests answer 500);
versions 1 and 2 are untouched. --clients closed-loop keep-alive clients POST /v1/models/debtags/predict (one
debtags test text, k=10, no routing key) for the whole run, each answer's status, latency and X-Model-Version kept,
while three rollouts run one after the other through POST /v1/admin/models/debtags/rollout (steps 5 → 25 → 50 →
100, --interval-s per step, gates over --window-s):

1. version 2 (healthy): expected promoted, 0 failed requests;
2. version 3 (slow): expected rolled back by the p99 gate within one window of its first answer, 0 failed requests;
3. version 4 (5xx): expected rolled back by the 5xx gate within one window; its 500s are the injected fault, any
   other failure is counted as one.

    BENCH_PORTS=18350-18399 .venv/bin/python -m bench.rollout_gates --bundle bundles/debtags-xl \\
        --texts ../shared/data/debtags/test.jsonl.gz

Prints JSON and writes bench/results/rollout_gates.json; exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus

from bench.helpers.load import Conn, raise_fd_limit
from bench.helpers.results import save_result
from bench.helpers.server import free_port

ADMIN_KEY = "bench-admin"
ADMIN = f"X-Admin-Key: {ADMIN_KEY}\r\n"
ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("1", "2", "3", "4")
# The server, with this script's faults: version 3 sleeps, version 4 raises (served_version is set once a version
# goes live, so its warm-up at load is untouched). The product has no such switch.
SERVER = """
import time
from xtag.service.state.model_slot import ServedModel
from xtag.service.server import serve

predict = ServedModel.predict

def faulty(self, *args, **kwargs):
    if self.served_version == "3":
        time.sleep({slow_s})
    if self.served_version == "4":
        raise RuntimeError("injected by bench.rollout_gates")
    return predict(self, *args, **kwargs)

ServedModel.predict = faulty
serve(None, "127.0.0.1", {port}, 1, bundle_root={root!r}, admin_key={key!r})
"""


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True, help="an XR-Linear bundle (every version is a copy)")
    ap.add_argument("--texts", type=Path, required=True, help="a corpus whose texts the clients send")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--interval-s", type=float, default=12.0, help="how long each step holds")
    ap.add_argument("--window-s", type=float, default=10.0, help="the gates' window")
    ap.add_argument("--min-requests", type=int, default=30, help="answers of each version before a gate judges")
    ap.add_argument("--slow-ms", type=float, default=200.0, help="how late version 3 answers")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds each rollout may take at most")
    ap.add_argument("--result-name", default="rollout_gates")
    return ap.parse_args()


def bundle_root(bundle: Path, folder: Path) -> Path:
    """ROOT/debtags/1..4, copies of `bundle`, and a models.toml that makes 1 the stable version."""
    for version in VERSIONS:
        shutil.copytree(bundle, folder / "debtags" / version)
    table = ", ".join(f'"{v}" = "debtags/{v}"' for v in VERSIONS)
    (folder / "models.toml").write_text(f'[models.debtags]\nversions = {{{table}}}\nstable = "1"\n')
    return folder


def start_server(root: Path, port: int, slow_s: float, log) -> subprocess.Popen:
    """The server, its JSON log lines into `log` (a file: version 4's 500s log as many lines as they are)."""
    env = {**os.environ, "XTAG_LOG_LEVEL": "info", "XTAG_LOG_FORMAT": "json"}
    code = SERVER.format(slow_s=slow_s, port=port, root=str(root), key=ADMIN_KEY)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stderr=log)


async def get_json(conn: Conn, path: str, method: str = "GET", body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    status, _, raw = await conn.request(method, path, data, ADMIN)
    return status, json.loads(raw) if raw else {}


async def wait_loaded(port: int, deadline: float) -> None:
    """Until every version of the model has loaded (the versions beside the stable one load after it)."""
    while time.time() < deadline:
        try:
            conn = await Conn.open(port)
            status, entry = await get_json(conn, "/v1/models/debtags")
            conn.close()
            if status == 200 and all(v["state"] == "ready" for v in entry["versions"]):
                return
        except OSError:
            pass
        await asyncio.sleep(0.2)
    raise SystemExit("the server's versions did not load in time")


class Answers:
    """Every answer the clients got: when (monotonic), status (0: a connection error), latency, version."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.status: list[int] = []
        self.seconds: list[float] = []
        self.version: list[str] = []

    def add(self, t: float, status: int, seconds: float, version: str) -> None:
        self.t.append(t)
        self.status.append(status)
        self.seconds.append(seconds)
        self.version.append(version)


async def client(port: int, bodies: list[bytes], offset: int, stop: asyncio.Event, answers: Answers) -> None:
    """Closed loop on one keep-alive connection, reconnecting after a connection error (counted as status 0)."""
    conn, i = None, offset
    while not stop.is_set():
        start = time.monotonic()
        try:
            if conn is None:
                conn = await Conn.open(port)
            status, headers, _ = await conn.request("POST", "/v1/models/debtags/predict", bodies[i % len(bodies)])
            answers.add(start, status, time.monotonic() - start, headers.get("x-model-version", ""))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            answers.add(start, 0, time.monotonic() - start, "")
            if conn is not None:
                conn.close()
            conn = None
            await asyncio.sleep(0.01)
        i += 1
    if conn is not None:
        conn.close()


async def one_rollout(port: int, version: str, args: argparse.Namespace) -> dict:
    """Start a rollout of `version` and follow it (GET every 50 ms) until it ends: its states with when each began."""
    conn = await Conn.open(port)
    policy = {
        "version": version,
        "steps": [5, 25, 50, 100],
        "interval_s": args.interval_s,
        "window_s": args.window_s,
        "gates": {"min_requests": args.min_requests},
    }
    began = time.monotonic()
    status, answer = await get_json(conn, "/v1/admin/models/debtags/rollout", "POST", policy)
    if status != 202:
        raise SystemExit(f"rollout of {version} refused: {status} {answer}")
    seen, state = [], answer
    deadline = began + args.timeout
    while state["state"] in ("waiting", "running") and time.monotonic() < deadline:
        key = (state["state"], state["canary_percent"])
        if not seen or seen[-1][0] != key:
            seen.append((key, time.monotonic()))
        await asyncio.sleep(0.05)
        _, state = await get_json(conn, "/v1/admin/models/debtags/rollout")
    ended = time.monotonic()
    conn.close()
    steps = [{"state": s, "canary_percent": p, "at_s": round(t - began, 3)} for (s, p), t in seen]
    return {"version": version, "began": began, "ended": ended, "state": state, "steps": steps}


async def served_counts(port: int) -> dict[tuple[str, str], float]:
    """The server's own count of the model's answers by (version, status), from /metrics: a 500 answer carries no
    X-Model-Version header, the server's series still name its version."""
    from prometheus_client.parser import text_string_to_metric_families

    conn = await Conn.open(port)
    _, _, raw = await conn.request("GET", "/metrics", None)
    conn.close()
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(raw.decode()):
        for s in family.samples:
            if s.name == "xtag_http_requests_total" and s.labels.get("model") == "debtags":
                key = (s.labels["version"], s.labels["status"])
                counts[key] = counts.get(key, 0.0) + s.value
    return counts


def summary(run: dict, answers: Answers, faulty: str | None) -> dict:
    """One rollout's figures from the clients' answers between its start and its end, and the server's counts."""
    t, status = np.array(answers.t), np.array(answers.status)
    seconds, version = np.array(answers.seconds), np.array(answers.version)
    inside = (t >= run["began"]) & (t <= run["ended"])
    canary = inside & (version == run["version"])
    failed = inside & ((status < 200) | (status >= 300))
    served = {k: run["counts_after"].get(k, 0.0) - run["counts_before"].get(k, 0.0) for k in run["counts_after"]}
    injected = int(sum(n for (v, code), n in served.items() if v == run["version"] and code.startswith("5")))
    out = {
        "version": run["version"],
        "fault": faulty,
        "final_state": run["state"]["state"],
        "reason": run["state"]["reason"],
        "steps": run["steps"],
        "duration_s": round(run["ended"] - run["began"], 3),
        "requests": int(inside.sum()),
        "canary_requests": int(sum(n for (v, _), n in served.items() if v == run["version"])),
        "failed_requests": int(failed.sum()) - injected,
        "injected_5xx": injected,
        "gates": run["state"]["gates"],
    }
    for name, mask in (("canary", canary), ("stable", inside & ~canary & (status == 200))):
        picked = seconds[mask]
        out[f"{name}_p50_ms"] = round(float(np.percentile(picked, 50)) * 1e3, 2) if picked.size else None
        out[f"{name}_p99_ms"] = round(float(np.percentile(picked, 99)) * 1e3, 2) if picked.size else None
    fault_seen = canary if faulty == "slow" else failed
    if faulty is not None and fault_seen.any():  # from the faulty canary's first answer to the rollback
        rolled = next((s["at_s"] for s in run["steps"] if s["state"] == "rolled_back"), None)
        end = run["began"] + rolled if rolled is not None else run["ended"]
        out["rollback_after_first_canary_answer_s"] = round(end - float(t[fault_seen].min()), 3)
    return out


async def drive(port: int, bodies: list[bytes], args: argparse.Namespace) -> tuple[list[dict], int]:
    """The clients for the whole run; the three rollouts one after the other."""
    answers, stop = Answers(), asyncio.Event()
    tasks = [asyncio.create_task(client(port, bodies, i * 97, stop, answers)) for i in range(args.clients)]
    await asyncio.sleep(2.0)  # the clients' connections up, the stable version warm
    out = []
    for version, fault in (("2", None), ("3", "slow"), ("4", "errors")):
        before = await served_counts(port)
        run = await one_rollout(port, version, args)
        await asyncio.sleep(1.0)  # the first answers after the end count with it
        run["ended"] = time.monotonic()
        run["counts_before"], run["counts_after"] = before, await served_counts(port)
        out.append(summary(run, answers, fault))
    stop.set()
    await asyncio.gather(*tasks)
    return out, len(answers.t)


def verdict(runs: list[dict], window_s: float) -> list[str]:
    """What missed the issue's bar."""
    misses = []
    healthy, slow, errors = runs
    if healthy["final_state"] != "promoted":
        misses.append(f"the healthy canary ended {healthy['final_state']}: {healthy['reason']}")
    for run, gate in ((slow, "p99"), (errors, "5xx")):
        if run["final_state"] != "rolled_back" or gate not in (run["reason"] or ""):
            misses.append(f"version {run['version']} ({run['fault']}) ended {run['final_state']}: {run['reason']}")
        elif run.get("rollback_after_first_canary_answer_s", 0.0) > window_s:
            misses.append(f"version {run['version']}: rolled back {run['rollback_after_first_canary_answer_s']} s "
                          f"after its first answer, over one window ({window_s} s)")  # fmt: skip
    misses += [
        f"{r['failed_requests']} failed requests during version {r['version']}" for r in runs if r["failed_requests"]
    ]
    return misses


def main() -> int:
    args = parse_args()
    raise_fd_limit()
    texts = load_corpus(args.texts).texts[:2000]
    bodies = [json.dumps({"text": text, "k": 10}).encode() for text in texts]
    with tempfile.TemporaryDirectory(prefix="xtag-rollout-") as tmp:
        root, port = bundle_root(args.bundle, Path(tmp)), free_port()
        log = Path(tmp) / "server.log"
        with log.open("w") as sink:
            server = start_server(root, port, args.slow_ms / 1e3, sink)
            try:
                asyncio.run(wait_loaded(port, time.time() + 300))
                runs, total = asyncio.run(drive(port, bodies, args))
            finally:
                server.terminate()
                server.wait(timeout=30)
        rollout_lines = [line for line in log.read_text().splitlines() if '"rollout_' in line]
    payload = {
        "bundle": args.bundle.name,
        "clients": args.clients,
        "window_s": args.window_s,
        "interval_s": args.interval_s,
        "min_requests": args.min_requests,
        "slow_ms": args.slow_ms,
        "answers": total,
        "runs": runs,
        "log_lines": rollout_lines,
        "misses": verdict(runs, args.window_s),
    }
    save_result(args.result_name, payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "log_lines"}, indent=1))
    return 1 if payload["misses"] else 0


if __name__ == "__main__":
    sys.exit(main())
