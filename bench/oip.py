"""The Open Inference Protocol (issue 50): tritonclient[http] against `xtag serve`, the same top k as /v1/predict for
every text, and what the protocol costs against /v1 on the same server.

    .venv/bin/python -m bench.oip --bundle bundles/debtags-xl --test data/debtags/test.jsonl.gz \\
        --result-name oip_debtags

One server (default settings). Parity: the first --texts texts of --test, each through tritonclient's `infer` as a
user would call it (its defaults: binary input and outputs) and through /v1/predict, k = --k; a text agrees when its
label ids and float32 scores are equal in order. Then all of them at once: one `infer` of [n] texts against one
/v1/predict/batch. Latency: single-text requests over one keep-alive connection (sequential client, the same raw
HTTP client for both, so that only the server's side differs), /v1/predict and the protocol's JSON infer taking turns
for --rounds rounds of --requests each; then --batches batches of --batch texts each way. The ratios are medians of
the per-round ratios of one run, with the load average recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import orjson
import tritonclient.http as httpclient
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import Conn, free_port, start_server, timed


def v1_rows(port: int, texts: list[str], k: int) -> list[list[tuple[str, float]]]:
    async def run() -> list[list[tuple[str, float]]]:
        conn = await Conn.open(port)
        try:
            rows = []
            for text in texts:
                status, body = await conn.request("POST", "/v1/predict", orjson.dumps({"text": text, "k": k}))
                assert status == 200, body[:300]
                rows.append([(x["name"], np.float32(x["score"])) for x in orjson.loads(body)["labels"]])
            return rows
        finally:
            conn.close()

    return asyncio.run(run())


def triton_rows(result) -> list[list[tuple[str, float]]]:
    labels, scores = result.as_numpy("labels"), result.as_numpy("scores")
    return [[(n.decode(), s) for n, s in zip(ln, ls) if n] for ln, ls in zip(labels, scores)]


def text_input(texts: list[str]):
    tensor = httpclient.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))  # binary, the default
    return tensor


def parity(port: int, model: str, texts: list[str], k: int) -> dict:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        v1 = v1_rows(port, texts, k)
        singles, took = [], []
        for text in texts:
            start = time.perf_counter()
            result = client.infer(model, [text_input([text])], parameters={"k": k})
            took.append(time.perf_counter() - start)
            singles.append(triton_rows(result)[0])
        whole = triton_rows(client.infer(model, [text_input(texts)], parameters={"k": k}))
        documents = {"documents": [{"text": t} for t in texts], "k": k}
        batch = httpx.post(f"http://127.0.0.1:{port}/v1/predict/batch", json=documents, timeout=300).json()["results"]
        v1_batch = [[(x["name"], np.float32(x["score"])) for x in r["labels"]] for r in batch]
        metadata = client.get_model_metadata(model)
    finally:
        client.close()
    return {
        "texts": len(texts),
        "k": k,
        "same_top_k_single": sum(a == b for a, b in zip(singles, v1)),
        "same_labels_single": sum([n for n, _ in a] == [n for n, _ in b] for a, b in zip(singles, v1)),
        "same_top_k_one_request": sum(a == b for a, b in zip(whole, v1_batch)),
        "labels_compared": sum(len(r) for r in v1),
        "tritonclient_p50_ms": float(np.percentile(took, 50) * 1e3),
        "model_version": metadata["versions"][0],
        "tritonclient_version": _version("tritonclient"),
    }


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def oip_body(texts: list[str], k: int) -> bytes:
    tensor = {"name": "text", "shape": [len(texts)], "datatype": "BYTES", "data": texts}
    return orjson.dumps({"inputs": [tensor], "parameters": {"k": k}})


def latency(port: int, model: str, texts: list[str], args) -> dict:
    infer = f"/v2/models/{model}/infer"
    singles = [texts[i % len(texts)] for i in range(args.requests)]
    v1_single = [orjson.dumps({"text": t, "k": args.k}) for t in singles]
    oip_single = [oip_body([t], args.k) for t in singles]
    chunks = [[texts[(b * args.batch + i) % len(texts)] for i in range(args.batch)] for b in range(args.batches)]
    v1_batch = [orjson.dumps({"documents": [{"text": t} for t in c], "k": args.k}) for c in chunks]
    oip_batch = [oip_body(c, args.k) for c in chunks]
    asyncio.run(timed(port, "/v1/predict", v1_single[:200]))  # warm-up, both ways
    asyncio.run(timed(port, infer, oip_single[:200]))
    rounds = []
    for r in range(args.rounds):
        ways = [
            ("v1", "/v1/predict", v1_single, "/v1/predict/batch", v1_batch),
            ("oip", infer, oip_single, infer, oip_batch),
        ]
        if r % 2:
            ways.reverse()  # neither always runs right after the other
        row = {"load_1m": round(os.getloadavg()[0], 2)}
        for name, path, bodies, batch_path, batch_bodies in ways:
            single = asyncio.run(timed(port, path, bodies))
            batched = asyncio.run(timed(port, batch_path, batch_bodies))
            row[f"{name}_p50_ms"] = float(np.percentile(single, 50) * 1e3)
            row[f"{name}_p99_ms"] = float(np.percentile(single, 99) * 1e3)
            row[f"{name}_batch_docs_per_s"] = float(len(batch_bodies) * args.batch / batched.sum())
        row["p50_ratio"] = row["oip_p50_ms"] / row["v1_p50_ms"]
        row["p99_ratio"] = row["oip_p99_ms"] / row["v1_p99_ms"]
        row["batch_ratio"] = row["v1_batch_docs_per_s"] / row["oip_batch_docs_per_s"]  # > 1: the protocol is slower
        rounds.append(row)
        print(row, file=sys.stderr)
    return {
        "requests": args.requests,
        "batches": args.batches,
        "batch": args.batch,
        "rounds": rounds,
        "p50_ratio": float(np.median([r["p50_ratio"] for r in rounds])),
        "p99_ratio": float(np.median([r["p99_ratio"] for r in rounds])),
        "batch_ratio": float(np.median([r["batch_ratio"] for r in rounds])),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True, help="texts to send (a corpus: JSONL, TSV, ...)")
    ap.add_argument("--texts", type=int, default=500, help="texts whose top k is compared")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--result-name", default="oip")
    args = ap.parse_args()
    texts = load_corpus(args.test).texts[: args.texts]
    port = free_port()
    proc = start_server(args.bundle, port, "true")
    model = args.bundle.resolve().name
    try:
        out = {"bundle": args.bundle.name, "corpus": args.test.name, "parity": parity(port, model, texts, args.k)}
        print(out["parity"], file=sys.stderr)
        out["latency"] = latency(port, model, texts, args)
    finally:
        proc.terminate()
        proc.wait(30)
    save_result(args.result_name, out)
    return 0 if out["parity"]["same_top_k_single"] == len(texts) else 1


if __name__ == "__main__":
    sys.exit(main())
