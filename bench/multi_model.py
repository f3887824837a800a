"""Several models in one server (issue 41): both answer, what the second costs in RSS, the default's latency beside
it, and lifecycles of one model under load on the other.

Starts, on 127.0.0.1, `xtag serve`'s code (bench/service_load.start_server: one worker, this checkout) three ways:
model A alone, model B alone, and A (the default) with B (`XTAG_MODELS=second=B`), and measures:

- both answer on /v1/models/NAME/predict, the default on /v1/predict; annif-client lists both projects and
  suggests with each; GET /v1/models lists both;
- RSS after the same warm traffic: the two-model server against the sum of the two one-model servers;
- the default's /v1/predict p50 (one text, sequential) and /v1/predict/batch docs/s (64 texts) in the two-model
  server against A alone (and A alone on --before-code's tree), the servers up at once and taking turns request by
  request, so that the machine's other work falls on all alike; and each server's CPU time per request;
- under load (--clients closed-loop clients on A's /v1/predict): reload B --reloads times, unload and load B
  again, then a failed load of B (a corrupt copy); every request on A must succeed.

    .venv/bin/python -m bench.multi_model --a bundles/debtags-xl --b bundles/debdeps-xl --texts \
        /work/shared/data/debtags/test.jsonl.gz --name multi_model_debtags_debdeps

Bounded: each phase has a fixed number of requests or seconds; servers are killed on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from bench.helpers import load as service_load
from bench.helpers import results
from bench.helpers.load import Conn, Tally, interleaved, ms, read_texts, rss_mib, stopped

ROOT = Path(__file__).resolve().parents[1]

ADMIN_KEY = "bench-admin"
ADMIN = f"X-Admin-Key: {ADMIN_KEY}\r\n"


@contextmanager
def server(a: Path, port: int, extra: dict, code: Path = ROOT):
    """One `xtag serve` of `a` (plus what `extra` configures; `code`: a folder holding the `xtag` package to run),
    killed on exit."""
    # back-to-back reloads are what the lifecycle measures: no XTAG_RELOAD_INTERVAL_S between them
    env = {"XTAG_ADMIN_KEY": ADMIN_KEY, "XTAG_MAX_QUEUE": "0", "XTAG_RELOAD_INTERVAL_S": "0", **extra}
    with stopped(service_load.start_server(a, port, None, code, env)) as proc:
        yield proc


async def call(port: int, method: str, path: str, body: dict | None = None, auth: str = "") -> tuple[int, dict]:
    conn = await Conn.open(port)
    try:
        raw = None if body is None else json.dumps(body).encode()
        status, _, data = await conn.request(method, path, raw, auth)
        return status, (json.loads(data) if data else {})
    finally:
        conn.close()


async def wait_model(port: int, name: str, timeout: float = 300) -> None:
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if (await call(port, "GET", f"/v1/models/{name}/ready"))[0] == 200:
            return
        await asyncio.sleep(0.2)
    raise SystemExit(f"model {name} not ready in {timeout} s")


def functional(port: int, texts: list[str], default: str) -> dict:
    """Both models answer on their routes and the default on /v1/predict; Annif's client and GET /v1/models see both."""
    import annif_client

    out = {}
    for path in ("/v1/predict", f"/v1/models/{default}/predict", "/v1/models/second/predict"):
        status, body = asyncio.run(call(port, "POST", path, {"text": texts[0], "k": 3}))
        out[path] = {"status": status, "model": body.get("model"), "top": [x["name"] for x in body.get("labels", [])]}
    annif = annif_client.AnnifClient(api_base=f"http://127.0.0.1:{port}/v1/")
    projects = [p["project_id"] for p in annif.projects]
    out["annif_projects"] = projects
    out["annif_suggest"] = {p: [r["label"] for r in annif.suggest(p, texts[0], limit=3)] for p in projects}
    listing = asyncio.run(call(port, "GET", "/v1/models"))[1]
    keep = ("name", "default", "state", "family", "version", "label_count", "memory_bytes")
    out["v1_models"] = [{k: m[k] for k in keep} for m in listing["models"]]
    return out


async def warm(port: int, texts: list[str], paths: list[str]) -> None:
    """The same traffic on every server before RSS is read: each model answers every text once."""
    conn = await Conn.open(port)
    try:
        for path in paths:
            for text in texts:
                await conn.request("POST", path, json.dumps({"text": text, "k": 10}).encode())
    finally:
        conn.close()


def compare_latency(servers: dict[str, tuple[int, int]], texts: list[str], rounds: int, per_round: int, batches: int):
    """The default model's p50 and batch docs/s, and each server's CPU per request and per batched document, the
    servers ({key: (port, pid)}) taking turns request by request."""
    singles = [json.dumps({"text": t, "k": 10}).encode() for t in texts[:per_round]]
    batch = json.dumps({"documents": [{"text": t} for t in texts[:64]], "k": 10}).encode()
    single = asyncio.run(interleaved(servers, "/v1/predict", singles, rounds))
    batched = asyncio.run(interleaved(servers, "/v1/predict/batch", [batch], batches))
    out = {}
    for key in servers:
        (seconds, cpu), (batch_seconds, batch_cpu) = single[key], batched[key]
        out[key] = {
            "requests": len(seconds),
            "batches": len(batch_seconds),
            "p50_ms": ms(seconds, 50),
            "p90_ms": ms(seconds, 90),
            "batch_docs_per_s": round(64 / float(np.median(batch_seconds)), 1),
            "server_cpu_ms_per_request": round(cpu * 1e3 / len(seconds), 4),
            "server_cpu_us_per_batch_doc": round(batch_cpu * 1e6 / (64 * len(batch_seconds)), 2),
        }
    keys = {"p50": "p50_ms", "batch": "batch_docs_per_s", "cpu_per_request": "server_cpu_ms_per_request",
            "cpu_per_batch_doc": "server_cpu_us_per_batch_doc"}  # fmt: skip
    pairs = [("two_over_one", "two_models", "one_model"), ("one_model_after_over_before", "one_model", "before")]
    for label, top, bottom in pairs:
        if bottom in out:
            out[label] = {name: round(out[top][key] / out[bottom][key], 3) for name, key in keys.items()}
    return out


async def lifecycle(port: int, corrupt: str, b: str, reloads: int) -> list[dict]:
    """Reload B `reloads` times, unload it, load it again, then a corrupt bundle for it: each call's status and s."""
    steps = [("POST", "/v1/admin/models/second/reload", {}, f"reload {i + 1}") for i in range(reloads)]
    steps += [
        ("DELETE", "/v1/admin/models/second", None, "unload"),
        ("PUT", "/v1/admin/models/second", {"bundle": b}, "load again"),
        ("PUT", "/v1/admin/models/second", {"bundle": corrupt}, "load a corrupt bundle"),
    ]
    out = []
    for method, path, body, what in steps:
        t = time.perf_counter()
        status, answer = await call(port, method, path, body, ADMIN)
        detail = answer.get("detail") or answer.get("status")
        out.append({"step": what, "status": status, "seconds": round(time.perf_counter() - t, 3), "detail": detail})
        await asyncio.sleep(0.5)
    return out


async def under_load(port: int, texts: list[str], clients: int, corrupt: str, b: str, reloads: int) -> dict:
    """--clients closed-loop clients on A's /v1/predict while B goes through its lifecycle."""
    bodies = [json.dumps({"text": t, "k": 10}).encode() for t in texts]
    tally, stop_at = Tally(), time.perf_counter() + 3600
    tasks = [
        asyncio.create_task(service_load.client(port, bodies, i * 7, stop_at, tally, False, "")) for i in range(clients)
    ]
    await asyncio.sleep(2)
    start = time.perf_counter()
    steps = await lifecycle(port, corrupt, b, reloads)
    await asyncio.sleep(1)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    status = np.array(tally.status)
    seconds = np.array(tally.seconds)
    after = await call(port, "GET", "/v1/models")
    return {
        "clients_on_default": clients,
        "lifecycle_seconds": round(time.perf_counter() - start, 1),
        "steps": steps,
        "default_requests": len(status),
        "default_failed": int((status != 200).sum()) + tally.connection_errors,
        "default_p50_ms": ms(seconds, 50),
        "default_p99_ms": ms(seconds, 99),
        "second_after": next(m for m in after[1]["models"] if m["name"] == "second"),
    }


def corrupt_copy(b: Path, root: Path) -> Path:
    """A copy of B under the bundle root whose label file no longer matches its manifest (refused at load)."""
    out = root / ".multi-model-corrupt"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(b, out)
    (out / "labels.json").write_text('{"names": ["x"], "frequencies": [1], "n_train_docs": 1}')
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", type=Path, required=True, help="the default model's bundle")
    p.add_argument("--b", type=Path, required=True, help="the second model's bundle (same parent: the bundle root)")
    p.add_argument("--texts", type=Path, required=True, help="JSONL(.gz) with a 'text' per row")
    p.add_argument("--name", default="multi_model")
    p.add_argument("--port", type=int, default=18250, help="four consecutive ports are used")
    p.add_argument("--rounds", type=int, default=6, help="times each of --per-round texts is sent to each server")
    p.add_argument("--per-round", type=int, default=300)
    p.add_argument("--batches", type=int, default=120, help="batches of 64 texts sent to each server")
    p.add_argument("--clients", type=int, default=24)
    p.add_argument("--reloads", type=int, default=5)
    p.add_argument("--before-code", type=Path, help="also time A alone on this `xtag` package (e.g. main's tree)")
    args = p.parse_args()
    texts = read_texts(args.texts, max(args.per_round, 500))
    root = args.b.resolve().parent
    two = {"XTAG_MODELS": f"second={args.b.resolve()}", "XTAG_BUNDLE_ROOT": str(root)}
    paths_a, paths_b = ["/v1/predict"], ["/v1/models/second/predict"]
    out: dict = {"a": args.a.name, "b": args.b.name}
    with ExitStack() as stack:
        one_a = stack.enter_context(server(args.a, args.port, {}))
        both = stack.enter_context(server(args.a, args.port + 1, two))
        asyncio.run(wait_model(args.port + 1, "second"))
        asyncio.run(warm(args.port, texts[:200], paths_a))
        asyncio.run(warm(args.port + 1, texts[:200], paths_a + paths_b))
        out["functional"] = functional(args.port + 1, texts, args.a.name)
        rss = {"one_model_a": rss_mib(one_a.pid), "two_models": rss_mib(both.pid)}
        servers = {"one_model": (args.port, one_a.pid), "two_models": (args.port + 1, both.pid)}
        if args.before_code is not None:
            before = stack.enter_context(server(args.a, args.port + 3, {}, args.before_code.resolve()))
            asyncio.run(warm(args.port + 3, texts[:200], paths_a))
            servers["before"] = (args.port + 3, before.pid)
        out["latency"] = compare_latency(servers, texts, args.rounds, args.per_round, args.batches)
        with server(args.b, args.port + 2, {}) as one_b:
            asyncio.run(warm(args.port + 2, texts[:200], paths_a))
            rss["one_model_b"] = rss_mib(one_b.pid)
        rss = {k: round(v, 1) for k, v in rss.items()}
        rss["sum_of_one_model_servers"] = round(rss["one_model_a"] + rss["one_model_b"], 1)
        rss["second_model_cost"] = round(rss["two_models"] - rss["one_model_a"], 1)
        rss["one_model_b_over_a"] = round(rss["one_model_b"] - rss["one_model_a"], 1)
        out["rss_mib"] = rss
        corrupt = corrupt_copy(args.b, root)
        try:
            out["under_load"] = asyncio.run(
                under_load(args.port + 1, texts, args.clients, str(corrupt), str(args.b.resolve()), args.reloads)
            )
        finally:
            shutil.rmtree(corrupt, ignore_errors=True)
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=1))
    results.save_result(args.name, out)
    return 0 if out["under_load"]["default_failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
