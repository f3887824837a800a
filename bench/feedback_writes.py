"""Feedback writes on SQLite and PostgreSQL: concurrent writers, and the answers to input a store cannot keep.

Issue 38, items 4-6. For each store this starts the server (xtag.service.server.serve, one worker, an
admin key, XTAG_FEEDBACK_DB set to a fresh SQLite file or to a throwaway PostgreSQL cluster made by
tests/service/postgres_server.py) and drives it from this process:

  (a) writers: --clients closed-loop keep-alive clients each POST /v1/feedback --docs times, one document
      with an id of its own a request → answers by status (target: 0 refused), stored documents per
      second of the phase, p50/p99 latency, and the rows the store holds after it (target: every document)
  (b) inputs: a NUL character in `text`, `id` or a label name (/v1/feedback) and in Annif learn's text; ids
      2^64+1 and 2^64+2 (two documents: both must be stored); `1e3` as an id (a float: refused); the same
      big ids in /v1/predict/batch (echoed back exactly) → each answer's status and what it said

--server-code DIR serves another checkout's code, for before/after figures on the same machine state.
Every request has a 30 s deadline and each phase 180 s, so a run ends even against a stuck server.

    .venv/bin/python -m bench.feedback_writes --bundle bundles/debtags-xl --port 18400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.helpers import load as service_load
from tests.service.postgres_server import PostgresServer, PostgresUnavailable

ROOT = Path(__file__).resolve().parents[1]

ADMIN_KEY = "bench-adm1n"
AUTH = f"X-Admin-Key: {ADMIN_KEY}\r\n"
REQUEST_S = 30.0
PHASE_S = 180.0
BIG = 2**64


async def writer(port: int, client: int, docs: int, tally: dict) -> None:
    conn = await service_load.Conn.open(port)
    try:
        for i in range(docs):
            body = {"documents": [{"id": f"c{client}-d{i}", "text": f"client {client} document {i}", "labels": ["x"]}]}
            start = time.perf_counter()
            try:
                status, headers, data = await asyncio.wait_for(
                    conn.request("POST", "/v1/feedback", json.dumps(body).encode(), AUTH), REQUEST_S
                )
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                tally["errors"].append(type(exc).__name__)
                conn.close()
                conn = await service_load.Conn.open(port)
                continue
            tally["seconds"].append(time.perf_counter() - start)
            tally["status"][status] = tally["status"].get(status, 0) + 1
            if status == 200:
                tally["stored"] += json.loads(data)["stored"]
            elif status == 503 and "retry-after" not in headers:
                tally["503_without_retry_after"] += 1
    finally:
        conn.close()


async def writers_phase(port: int, clients: int, docs: int) -> dict:
    tally = {"status": {}, "seconds": [], "stored": 0, "errors": [], "503_without_retry_after": 0}
    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(writer(port, c, docs, tally) for c in range(clients))), PHASE_S)
    wall = time.perf_counter() - start
    seconds = np.array(tally["seconds"]) * 1000
    return {
        "clients": clients,
        "documents_sent": clients * docs,
        "answers": {str(k): v for k, v in sorted(tally["status"].items())},
        "refused_503": tally["status"].get(503, 0),
        "503_without_retry_after": tally["503_without_retry_after"],
        "connection_errors": len(tally["errors"]),
        "stored": tally["stored"],
        "seconds": round(wall, 2),
        "stored_docs_per_s": round(tally["stored"] / wall, 1),
        "latency_ms": {
            "p50": round(float(np.percentile(seconds, 50)), 1) if len(seconds) else None,
            "p99": round(float(np.percentile(seconds, 99)), 1) if len(seconds) else None,
        },
    }


async def post(port: int, path: str, raw: bytes) -> dict:
    conn = await service_load.Conn.open(port)
    try:
        status, _, data = await asyncio.wait_for(conn.request("POST", path, raw, AUTH), REQUEST_S)
    finally:
        conn.close()
    answer = data.decode(errors="replace")
    try:
        parsed = json.loads(answer) if answer else None
    except json.JSONDecodeError:
        parsed = answer
    if isinstance(parsed, dict) and "detail" in parsed:
        parsed = parsed["detail"][:160]
    return {"status": status, "answer": parsed}


async def inputs_phase(port: int, project: str) -> dict:
    """Bodies written by hand: JSON's big integers and 1e3 must reach the server as they are written."""
    nul = "a\\u0000b"
    feedback = {
        "nul_in_text": f'{{"documents": [{{"id": "nul-t", "text": "{nul}", "labels": ["x"]}}]}}',
        "nul_in_id": f'{{"documents": [{{"id": "{nul}", "text": "nul id", "labels": ["x"]}}]}}',
        "nul_in_label": f'{{"documents": [{{"id": "nul-l", "text": "nul label", "labels": ["{nul}"]}}]}}',
        "id_2^64+1": f'{{"documents": [{{"id": {BIG + 1}, "text": "first big id", "labels": ["x"]}}]}}',
        "id_2^64+2": f'{{"documents": [{{"id": {BIG + 2}, "text": "second big id", "labels": ["x"]}}]}}',
        "id_1e3": '{"documents": [{"id": 1e3, "text": "float id", "labels": ["x"]}]}',
    }
    out = {name: await post(port, "/v1/feedback", body.encode()) for name, body in feedback.items()}
    learn = f'[{{"text": "{nul}", "subjects": [{{"label": "x"}}], "document_id": "nul-learn"}}]'
    out["learn_nul_in_text"] = await post(port, f"/v1/projects/{project}/learn", learn.encode())
    batch = f'{{"documents": [{{"id": {BIG + 1}, "text": "python"}}, {{"id": {BIG + 2}, "text": "python"}}], "k": 1}}'
    answer = await post(port, "/v1/predict/batch", batch.encode())
    if isinstance(answer["answer"], dict):
        answer["answer"] = [r["id"] for r in answer["answer"]["results"]]
    out["batch_big_ids"] = answer
    return out


def stored_rows(target: str) -> list[dict]:
    from xtag.service.state.feedback_store import FeedbackStore

    store = FeedbackStore(target)
    try:
        return list(store.rows())
    finally:
        store.close()


def run_store(name: str, target: str, args) -> dict:
    extra = {"XTAG_LOG_LEVEL": "error", "XTAG_ADMIN_KEY": ADMIN_KEY, "XTAG_FEEDBACK_DB": target}
    extra.update(dict(item.split("=", 1) for item in args.env))
    server = service_load.start_server(args.bundle, args.port, None, args.server_code, extra)
    try:
        status, _, data = asyncio.run(service_load._once(args.port, "GET", "/v1/projects"))
        project = json.loads(data)["projects"][0]["project_id"]
        result = {"writers": asyncio.run(writers_phase(args.port, args.clients, args.docs))}
        print(f"{name} writers: {json.dumps(result['writers'])}", file=sys.stderr)
        result["inputs"] = asyncio.run(inputs_phase(args.port, project))
    finally:
        server.terminate()
        server.wait(60)
    rows = stored_rows(target)
    result["writers"]["rows_in_store"] = sum(1 for r in rows if r["id"].startswith("c"))
    result["inputs"]["big_id_rows"] = sorted(r["id"] for r in rows if r["text"].endswith("big id"))
    print(f"{name} inputs: {json.dumps(result['inputs'])}", file=sys.stderr)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="any bundle (the predictions are not measured)")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--docs", type=int, default=50, help="documents per client, one a request")
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--port", type=int, default=18400, help="the server's; PostgreSQL gets the next one")
    ap.add_argument("--server-code", type=Path, default=ROOT, help="folder whose `xtag` package the server runs")
    ap.add_argument("--env", action="append", default=[], metavar="XTAG_NAME=VALUE", help="a server setting")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    results: dict = {"cpus": os.cpu_count(), "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    for name in args.stores.split(","):
        if name == "sqlite":
            with tempfile.TemporaryDirectory(prefix="feedback_writes_") as folder:
                results[name] = run_store(name, str(Path(folder) / "fb.sqlite3"), args)
        elif name == "postgres":
            pg = PostgresServer(args.port + 1)
            try:
                results[name] = run_store(name, pg.start(), args)
            except PostgresUnavailable as exc:
                results[name] = {"skipped": str(exc)}
            finally:
                pg.stop()
        else:
            raise SystemExit(f"unknown store {name!r}: sqlite or postgres")
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
