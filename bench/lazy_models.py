"""Lazy load and LRU eviction (issue 50): three models in one server with memory for two (XTAG_EVICT=lru).

Starts, on 127.0.0.1, `xtag serve`'s code (bench/helpers/load.start_server: one worker, this checkout) of three
bundles, each a copy of --bundle in a folder of its own (so that each loads its own arrays): `m0` the default
(pinned: loaded at start, never evicted), `m1` and `m2` loaded on their first request. XTAG_MAX_MEMORY_MB is set
from the server's own RSS with the default loaded, plus --room times the bundle's size (1.7: a second model fits,
a third does not, with room for what an evicted model leaves behind), measured on a first server of the same
settings. Then, on one server:

- cold: one request at a time on m1, m2, m1, ... (each evicts the other and waits for its load), beside warm
  requests on m0: the latency of a request that waits for a load, against one that does not;
- load: --clients keep-alive clients, closed loop, each request to one of the three models at random (seeded),
  for --seconds: every answer must be a 200; the server's loads, evictions and load-wait histogram from /metrics.

    BENCH_PORTS=18700-18720 .venv/bin/python -m bench.lazy_models --bundle bundles/debtags-xl \\
        --texts /work/shared/data/debtags/test.jsonl.gz --result-name lazy_models_debtags
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.helpers.load import Conn, read_texts, rss_mib, start_server, stopped
from bench.helpers.results import save_result
from bench.helpers.server import free_port

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("m0", "m1", "m2")


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True, help="the bundle each of the three models is a copy of")
    ap.add_argument("--texts", type=Path, required=True, help="JSONL(.gz) with a 'text' per row")
    ap.add_argument("--room", type=float, default=1.7, help="XTAG_MAX_MEMORY_MB: RSS with m0 + this x bundle size")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--cold", type=int, default=10, help="requests that each wait for a load, one at a time")
    ap.add_argument("--result-name", default="lazy_models")
    return ap.parse_args()


def serve(root: Path, port: int, limit_mb: float):
    env = {
        "XTAG_MODELS": ",".join(f"{n}={root / n}" for n in NAMES[1:]),
        "XTAG_MAX_MEMORY_MB": f"{limit_mb:.0f}",
        "XTAG_EVICT": "lru",
        "XTAG_MAX_QUEUE": "0",
    }
    return start_server(root / NAMES[0], port, None, ROOT, env)


async def post(conn: Conn, model: str, text: str) -> tuple[int, float]:
    body = json.dumps({"text": text, "k": 5}).encode()
    start = time.perf_counter()
    status, _, _ = await conn.request("POST", f"/v1/models/{model}/predict", body)
    return status, time.perf_counter() - start


async def get(port: int, path: str) -> bytes:
    conn = await Conn.open(port)
    try:
        return (await conn.request("GET", path, None))[2]
    finally:
        conn.close()


async def cold(port: int, texts: list[str], n: int) -> dict:
    """m1, m2, m1, ...: each request evicts the other model and waits for its own load; a warm m0 request after each."""
    conn = await Conn.open(port)
    waited, warm, statuses = [], [], []
    try:
        for i in range(n):
            status, seconds = await post(conn, NAMES[1 + i % 2], texts[i])
            statuses.append(status)
            waited.append(seconds)
            status, seconds = await post(conn, NAMES[0], texts[i])
            statuses.append(status)
            warm.append(seconds)
    finally:
        conn.close()
    return {"waited_s": waited, "warm_s": warm, "failed": sum(s != 200 for s in statuses)}


async def load(port: int, texts: list[str], clients: int, seconds: float) -> dict:
    """Closed-loop clients, each request to a model drawn at random; every status and latency, by model."""
    stop_at = time.perf_counter() + seconds
    out = {name: {"seconds": [], "status": []} for name in NAMES}
    errors: list[str] = []

    async def client(c: int) -> None:
        rng, conn = np.random.default_rng(c), await Conn.open(port)
        try:
            while time.perf_counter() < stop_at:
                name = NAMES[int(rng.integers(len(NAMES)))]
                status, took = await post(conn, name, texts[int(rng.integers(len(texts)))])
                out[name]["seconds"].append(took)
                out[name]["status"].append(status)
        except (OSError, asyncio.IncompleteReadError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    await asyncio.gather(*(client(c) for c in range(clients)))
    return {"by_model": out, "connection_errors": errors}


def metrics(port: int) -> dict:
    text = asyncio.run(get(port, "/metrics")).decode()
    wanted = ("xtag_model_loads_total", "xtag_model_evictions_total", "xtag_model_load_wait_seconds_count",
              "xtag_model_load_wait_seconds_sum")  # fmt: skip
    out: dict = {name: {} for name in wanted}
    buckets: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in wanted:
                out[s.name][s.labels["model"]] = s.value
            elif s.name == "xtag_model_load_wait_seconds_bucket":
                buckets.setdefault(s.labels["model"], []).append((float(s.labels["le"]), s.value))
    out["load_wait_buckets"] = buckets
    return out


def summary(seconds: list[float]) -> dict:
    a = np.asarray(seconds) * 1e3
    if not a.size:
        return {"n": 0}
    return {
        "n": int(a.size),
        **{f"p{q}_ms": float(np.percentile(a, q)) for q in (50, 90, 99)},
        "max_ms": float(a.max()),
    }


def main() -> int:
    args = parse_args()
    texts = read_texts(args.texts, 2000)
    bundle_mb = sum(f.stat().st_size for f in args.bundle.rglob("*") if f.is_file()) / 2**20
    with tempfile.TemporaryDirectory(prefix="xtag-lazy-bench-") as tmp:
        root = Path(tmp)
        for name in NAMES:
            shutil.copytree(args.bundle, root / name)
        port = free_port()
        with stopped(serve(root, port, 100_000)) as proc:  # the first server: RSS with the default loaded alone
            base_mb = rss_mib(proc.pid)
        limit_mb = base_mb + args.room * bundle_mb
        print(
            f"bundle {bundle_mb:.0f} MB, RSS with m0 {base_mb:.0f} MB: XTAG_MAX_MEMORY_MB={limit_mb:.0f}",
            file=sys.stderr,
        )
        port = free_port()
        with stopped(serve(root, port, limit_mb)) as proc:
            first = json.loads(asyncio.run(get(port, "/v1/models")))
            cold_run = asyncio.run(cold(port, texts, args.cold))
            print(f"cold done (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
            after_cold = metrics(port)
            run = asyncio.run(load(port, texts, args.clients, args.seconds))
            print(f"load done (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
            final = metrics(port)
            rss_end = rss_mib(proc.pid)
            last = json.loads(asyncio.run(get(port, "/v1/models")))
    by_model = run["by_model"]
    statuses = [s for m in by_model.values() for s in m["status"]]
    payload = {
        "bundle": args.bundle.name, "bundle_mb": round(bundle_mb, 1), "rss_with_default_mb": round(base_mb, 1),
        "max_memory_mb": round(limit_mb), "rss_end_mb": round(rss_end, 1), "clients": args.clients,
        "seconds": args.seconds,
        "states_at_start": {m["name"]: m["state"] for m in first["models"]},
        "states_at_end": {m["name"]: m["state"] for m in last["models"]},
        "cold": {"requests": args.cold, "failed": cold_run["failed"], "waited": summary(cold_run["waited_s"]),
                 "warm_default": summary(cold_run["warm_s"]), "metrics": after_cold},
        "load": {"requests": len(statuses), "failed": sum(s != 200 for s in statuses),
                 "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
                 "connection_errors": run["connection_errors"],
                 "by_model": {name: summary(m["seconds"]) for name, m in by_model.items()},
                 "all": summary([x for m in by_model.values() for x in m["seconds"]]),
                 "metrics": {k: {m: v - after_cold[k].get(m, 0) for m, v in final[k].items()}
                             for k in final if k != "load_wait_buckets"}},
    }  # fmt: skip
    print(json.dumps({k: payload[k] for k in ("cold", "load")}, indent=1, default=str)[:3000])
    save_result(args.result_name, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
