"""Model versions under load (issue 50): a canary ramp 0 → 5 → 50 → 100 % and a rollback under keep-alive clients,
each version's share against its weight, sticky keys, and the hot path's cost with no rollout configured.

Starts, on 127.0.0.1, `xtag serve`'s code (one worker) three ways:

- ramp: model `tags` of two versions (ROOT/models.toml: versions 1 and 2, stable 1); --clients closed-loop clients
  on keep-alive connections send /v1/predict, half of them with an X-Routing-Key drawn from --keys keys, while
  the admin plane sets 100/0, 95/5, 50/50, promotes version 2 (0/100) and rolls back (100/0), each setting held
  for --per-step answered requests. Every answer's X-Model-Version is read: per setting, each version's share of
  the requests sent and answered wholly within it (requests in flight across a change are not counted for either
  setting) against its weight, and how many keys met more than one version; failed requests over the whole run.
- no rollout: the same bundle alone (one version, nothing configured) on this code and on --before-code's (a
  folder holding main's `xtag` package; bench/contention.py code_folder makes one), taking turns request by
  request: /v1/predict p50 and /v1/predict/batch documents/s, and their ratios.

    .venv/bin/python -m bench.rollout_traffic --v1 bundles/debtags-v1 --v2 bundles/debtags-v2 \
        --texts /work/shared/data/debtags/test.jsonl.gz --before-code /tmp/main-code --name rollout_traffic_debtags

Bounded: each phase has a fixed number of requests; servers are killed on exit.
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
from collections import Counter, defaultdict
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from bench.helpers import load as service_load
from bench.helpers import results
from bench.helpers.load import Conn, interleaved, ms, read_texts, stopped

ROOT = Path(__file__).resolve().parents[1]
ADMIN_KEY = "bench-admin"
ADMIN = f"X-Admin-Key: {ADMIN_KEY}\r\n"
# (what, admin call): each weight setting of the ramp, then the promote and the rollback
STEPS = [
    ("1: 100 %", ("PUT", "/v1/admin/models/tags/traffic", {"weights": {"1": 100, "2": 0}})),
    ("canary 5 %", ("PUT", "/v1/admin/models/tags/traffic", {"weights": {"1": 95, "2": 5}})),
    ("canary 50 %", ("PUT", "/v1/admin/models/tags/traffic", {"weights": {"1": 50, "2": 50}})),
    ("promote 2 (100 %)", ("POST", "/v1/admin/models/tags/promote", {"version": "2"})),
    ("rollback to 1", ("POST", "/v1/admin/models/tags/rollback", {})),
]


@contextmanager
def versioned_server(root: Path, port: int):
    """`xtag serve` of XTAG_BUNDLE_ROOT=root (its models.toml), killed on exit; ready once every version is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XTAG_")}
    env.update(
        {"XTAG_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT), "XTAG_BUNDLE_ROOT": str(root),
         "XTAG_ADMIN_KEY": ADMIN_KEY, "XTAG_MAX_QUEUE": "0"}
    )  # fmt: skip
    code = f"from xtag.service.server import serve; serve(None, '127.0.0.1', {port}, 1)"
    with stopped(subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env)) as proc:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited with {proc.returncode}")
            try:
                status, body = asyncio.run(call(port, "GET", "/v1/models/tags"))
                if status == 200 and all(v["state"] == "ready" for v in body["versions"]):
                    break
            except (OSError, asyncio.IncompleteReadError):
                pass
            if time.time() > deadline:
                raise SystemExit("versions not ready in 300 s")
            time.sleep(0.2)
        yield proc


@contextmanager
def plain_server(bundle: Path, port: int, code: Path):
    with stopped(service_load.start_server(bundle, port, 0, code, {})) as proc:
        yield proc


async def call(port: int, method: str, path: str, body: dict | None = None, auth: str = "") -> tuple[int, dict]:
    conn = await Conn.open(port)
    try:
        status, _, data = await conn.request(method, path, None if body is None else json.dumps(body).encode(), auth)
        return status, (json.loads(data) if data else {})
    finally:
        conn.close()


async def ramp(port: int, texts: list[str], clients: int, keys: int, per_step: int) -> dict:
    """The clients run through every step; each answer is (sent, answered, key, version, status)."""
    bodies = [json.dumps({"text": t, "k": 10}).encode() for t in texts]
    answers: list[tuple[float, float, str | None, str | None, int]] = []
    errors: list[str] = []
    done = asyncio.Event()

    async def client(i: int) -> None:
        rng = np.random.default_rng(i)
        conn = await Conn.open(port)
        try:
            n = i
            while not done.is_set():
                key = f"user-{rng.integers(keys)}" if i % 2 == 0 else None
                extra = f"X-Routing-Key: {key}\r\n" if key else ""
                sent = time.perf_counter()
                try:
                    status, headers, _ = await conn.request("POST", "/v1/predict", bodies[n % len(bodies)], extra)
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    conn.close()
                    conn = await Conn.open(port)
                    continue
                answers.append((sent, time.perf_counter(), key, headers.get("x-model-version"), status))
                n += 1
        finally:
            conn.close()

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    changes = []  # (what, weights, started, ended)
    for what, (method, path, body) in STEPS:
        started = time.perf_counter()
        status, answer = await call(port, method, path, body, ADMIN)
        ended = time.perf_counter()
        assert status == 200, (what, status, answer)
        changes.append((what, answer["weights"], started, ended))
        goal = len(answers) + per_step
        while len(answers) < goal:
            await asyncio.sleep(0.05)
    done.set()
    await asyncio.gather(*tasks)
    return summarise(answers, errors, changes)


def summarise(answers, errors, changes) -> dict:
    """Per setting: the requests wholly within it, each version's share against its weight, keys on >1 version."""
    steps = []
    starts = [c[2] for c in changes[1:]] + [float("inf")]
    for i, (what, weights, _, ended) in enumerate(changes):
        inside = [a for a in answers if a[0] > ended and a[1] < starts[i]]
        versions = Counter(a[3] for a in inside)
        n = len(inside)
        shares = {v: round(100 * versions.get(v, 0) / n, 2) if n else None for v in weights}
        per_key = defaultdict(set)
        for a in inside:
            if a[2] is not None:
                per_key[a[2]].add(a[3])
        keyed = sum(1 for a in inside if a[2] is not None)
        steps.append(
            {
                "step": what,
                "weights": weights,
                "requests": n,
                "share_percent": shares,
                "max_share_gap_points": max(abs(shares[v] - w) for v, w in weights.items()) if n else None,
                "keyed_requests": keyed,
                "keys": len(per_key),
                "keys_on_one_version_percent": round(100 * sum(len(s) == 1 for s in per_key.values()) / len(per_key), 2)
                if per_key
                else None,
                "admin_call_ms": round((ended - changes[i][2]) * 1e3, 2),
            }
        )
    status = np.array([a[4] for a in answers])
    seconds = np.array([a[1] - a[0] for a in answers])
    return {
        "requests": len(answers),
        "failed": int((status != 200).sum()) + len(errors),
        "connection_errors": errors[:5],
        "p50_ms": ms(seconds, 50),
        "p99_ms": ms(seconds, 99),
        "steps": steps,
    }


def no_rollout(bundle: Path, port: int, before: Path | None, texts: list[str], rounds: int, batches: int) -> dict:
    """This code and --before-code's serving the bundle alone, taking turns: p50, batch docs/s and ratios."""
    codes = {"this": ROOT} | ({"before": before.resolve()} if before is not None else {})
    singles = [json.dumps({"text": t, "k": 10}).encode() for t in texts[:300]]
    batch = json.dumps({"documents": [{"text": t} for t in texts[:64]], "k": 10}).encode()
    with ExitStack() as stack:
        servers = {}
        for i, (key, code) in enumerate(codes.items()):
            proc = stack.enter_context(plain_server(bundle, port + i, code))
            servers[key] = (port + i, proc.pid)
        asyncio.run(interleaved(servers, "/v1/predict", singles[:100], 1))  # warm both
        single = asyncio.run(interleaved(servers, "/v1/predict", singles, rounds))
        batched = asyncio.run(interleaved(servers, "/v1/predict/batch", [batch], batches))
    out = {}
    for key in servers:
        seconds, batch_seconds = single[key][0], batched[key][0]
        out[key] = {
            "requests": len(seconds),
            "p50_ms": ms(seconds, 50),
            "p90_ms": ms(seconds, 90),
            "batches": len(batch_seconds),
            "batch_docs_per_s": round(64 / float(np.median(batch_seconds)), 1),
        }
    if "before" in out:
        out["this_over_before"] = {
            "p50": round(out["this"]["p50_ms"] / out["before"]["p50_ms"], 3),
            "batch": round(out["this"]["batch_docs_per_s"] / out["before"]["batch_docs_per_s"], 3),
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--v1", type=Path, required=True, help="version 1's bundle (the stable one)")
    p.add_argument("--v2", type=Path, required=True, help="version 2's bundle (the canary)")
    p.add_argument("--texts", type=Path, required=True, help="JSONL(.gz) with a 'text' per row")
    p.add_argument("--name", default="rollout_traffic")
    p.add_argument("--port", type=int, default=18450, help="three consecutive ports are used")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--keys", type=int, default=500, help="routing keys the keyed clients draw from")
    p.add_argument("--per-step", type=int, default=10_000, help="answered requests per weight setting")
    p.add_argument("--rounds", type=int, default=6, help="no-rollout phase: times each of 300 texts is sent")
    p.add_argument("--batches", type=int, default=100, help="no-rollout phase: batches of 64 texts")
    p.add_argument("--before-code", type=Path, help="a folder holding main's `xtag` package, for the no-rollout ratio")
    args = p.parse_args()
    texts = read_texts(args.texts, 500)
    out: dict = {"v1": args.v1.name, "v2": args.v2.name, "clients": args.clients, "keys": args.keys}
    with tempfile.TemporaryDirectory(prefix="rollout-traffic-") as tmp:
        root = Path(tmp)
        shutil.copytree(args.v1, root / "tags" / "1")
        shutil.copytree(args.v2, root / "tags" / "2")
        (root / "models.toml").write_text('[models.tags]\nversions = {"1" = "tags/1", "2" = "tags/2"}\nstable = "1"\n')
        with versioned_server(root, args.port):
            out["ramp"] = asyncio.run(ramp(args.port, texts, args.clients, args.keys, args.per_step))
    out["no_rollout"] = no_rollout(args.v1, args.port + 1, args.before_code, texts, args.rounds, args.batches)
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))
    results.save_result(args.name, out)
    return 0 if out["ramp"]["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
