"""Shadow scoring on debtags: a LaMP bundle shadowing the XR-Linear bundle it re-ranks, on live traffic.

Two servers on loopback, each serving both bundles (the primary the default model): one declares the second the
primary's shadow (XTAG_SHADOW), the other does not. The feedback store of the first is filled with the test split's
labels (POST /v1/feedback, by document id), then the test split is replayed through the default route
(/v1/predict/batch, one document per request with its id, one keep-alive client at a time), block by block, the two
servers taking turns (the order alternating), so that both see the same machine load. Reported, from one run:

- the agreement series the service exports (GET /v1/shadow, `xtag shadow report` on the saved /metrics);
- the live P@1/3/5 of both models from the feedback store, beside each bundle's offline figures (`xtag evaluate`
  on the whole test split);
- the primary's p50 and p90 at the client with the shadow and without (goal: within 10 %), and what was shed.

With `--fractions 1,0.25` (issue 50) one server per shadow fraction (XTAG_SHADOW_FRACTION) takes its turn beside the
one without a shadow, and each one's p50 is reported against it; the agreement and live P@k are the first's.

    BENCH_PORTS=18300-18349 .venv/bin/python -m bench.shadow --primary bundles/debtags-xl \\
        --shadow bundles/debtags-lamp --test ../shared/data/debtags/test.jsonl.gz
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import Conn, free_port, start_server, timed

ADMIN_KEY = "bench-admin"
ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--primary", type=Path, required=True, help="the served bundle (the default model)")
    ap.add_argument("--shadow", type=Path, required=True, help="the bundle declared its shadow")
    ap.add_argument("--test", type=Path, required=True, help="the labelled test split (replayed, and the feedback)")
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N test documents")
    ap.add_argument("--blocks", type=int, default=6, help="blocks the two servers take turns on")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument(
        "--fractions", default=None, help="comma-separated shadow fractions, a server each (default: one, at 1)"
    )
    ap.add_argument("--result-name", default="shadow_debtags")
    return ap.parse_args()


def serve(args: argparse.Namespace, work: Path, shadow: bool, fraction: float = 1.0) -> tuple[subprocess.Popen, int]:
    """A server of both bundles (primary first: the default), with the shadow declared (scoring `fraction` of the
    documents) or not; its own store."""
    port = free_port()
    names = (args.primary.name, args.shadow.name)
    env = {
        "XTAG_MODELS": f"{names[1]}={args.shadow.resolve()}",
        "XTAG_ADMIN_KEY": ADMIN_KEY,
        "XTAG_FEEDBACK_DB": str(work / f"feedback-{port}.sqlite3"),
        "XTAG_MAX_BATCH_DOCUMENTS": "256",
    }
    if shadow:
        env["XTAG_SHADOW"] = f"{names[1]}={names[0]}"
        env["XTAG_SHADOW_FRACTION"] = f"{fraction:g}"
    return start_server(args.primary, port, "true", **env), port


async def request(port: int, method: str, path: str, body: dict | None = None) -> dict:
    conn = await Conn.open(port)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Admin-Key: {ADMIN_KEY}\r\n"
        data = None if body is None else orjson.dumps(body)
        if data is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        conn.writer.write(head.encode() + b"\r\n" + (data or b""))
        headers = await conn.reader.readuntil(b"\r\n\r\n")
        length = next(int(x[15:]) for x in headers.split(b"\r\n") if x[:15].lower() == b"content-length:")
        answer = await conn.reader.readexactly(length)
        if int(headers[9:12]) != 200:
            raise RuntimeError(f"{method} {path}: HTTP {headers[9:12].decode()}: {answer[:300]!r}")
        return orjson.loads(answer) if answer.startswith(b"{") else {"text": answer.decode()}
    finally:
        conn.close()


def feed(port: int, ids: list[str], texts: list[str], labels: list[list[str]]) -> int:
    stored = 0
    for at in range(0, len(ids), 256):
        docs = [{"id": i, "text": t, "labels": y} for i, t, y in zip(ids[at : at + 256], texts[at:], labels[at:])]
        stored += asyncio.run(request(port, "POST", "/v1/feedback", {"documents": docs}))["stored"]
    return stored


def drained(port: int, expected: int, timeout: float = 600) -> dict:
    """/v1/shadow once every replayed document was compared, shed or failed (or the count stopped moving)."""
    deadline, last, still = time.monotonic() + timeout, -1, 0
    while True:
        pair = asyncio.run(request(port, "GET", "/v1/shadow"))["pairs"][0]
        done = pair["documents"] + pair["shed_documents"] + pair["errors"] + pair.get("unsampled_documents", 0)
        still = still + 1 if done == last else 0
        if done >= expected or still >= 20 or time.monotonic() > deadline:
            return pair
        last = done
        time.sleep(0.5)


def offline(bundle: Path, test: Path, work: Path) -> dict:
    """`xtag evaluate` on the whole test split: P@1/3/5."""
    out = work / f"evaluate-{bundle.name}.json"
    xtag = Path(sys.executable).parent / "xtag"
    subprocess.run([str(xtag), "evaluate", str(bundle), "--corpus", str(test), "--json", str(out), "--no-progress"],
                   check=True, capture_output=True)  # fmt: skip
    metrics = json.loads(out.read_text())  # flat: "P@1", ... in percent
    return {f"P@{k}": round(float(metrics[f"P@{k}"]), 2) for k in (1, 3, 5)}


def replay(args: argparse.Namespace, ports: dict[str, int], bodies: list[bytes]) -> dict[str, np.ndarray]:
    """The bodies in `blocks` blocks, each sent to every server in turn (alternating the order)."""
    times: dict[str, list] = {name: [] for name in ports}
    edges = np.linspace(0, len(bodies), args.blocks + 1).astype(int)
    for b in range(args.blocks):
        order = list(ports) if b % 2 == 0 else list(ports)[::-1]
        for name in order:
            times[name].append(asyncio.run(timed(ports[name], "/v1/predict/batch", bodies[edges[b] : edges[b + 1]])))
        print(f"block {b + 1}/{args.blocks} (load {os.getloadavg()[0]:.2f})", file=sys.stderr)
    return {name: np.concatenate(parts) for name, parts in times.items()}


def main() -> int:
    args = parse_args()
    corpus = load_corpus(args.test)
    n = len(corpus.texts) if args.limit is None else min(args.limit, len(corpus.texts))
    ids, texts, labels = [str(i) for i in corpus.ids[:n]], corpus.texts[:n], [list(y) for y in corpus.labels[:n]]
    bodies = [orjson.dumps({"documents": [{"id": i, "text": t}], "k": args.k}) for i, t in zip(ids, texts)]
    fractions = None if args.fractions is None else [float(f) for f in args.fractions.split(",")]
    with tempfile.TemporaryDirectory(prefix="xtag-shadow-bench-") as tmp:
        work = Path(tmp)
        shadowed = {"with shadow": 1.0} if fractions is None else {f"shadow at {f:g}": f for f in fractions}
        servers = {name: serve(args, work, True, f) for name, f in shadowed.items()}
        servers["without"] = serve(args, work, False)
        ports = {name: port for name, (_, port) in servers.items()}
        first = next(iter(shadowed))  # the server whose comparison is reported
        try:
            stored = feed(ports[first], ids, texts, labels)
            for port in ports.values():  # warm-up, not recorded (its documents are compared too: ids repeat)
                asyncio.run(timed(port, "/v1/predict/batch", bodies[:100]))
            times = replay(args, ports, bodies)
            pairs = {name: drained(ports[name], n + 100) for name in shadowed}
            pair = pairs[first]
            exposition = asyncio.run(request(ports[first], "GET", "/metrics"))["text"]
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
        (work / "metrics.txt").write_text(exposition)
        report = subprocess.run([str(Path(sys.executable).parent / "xtag"), "shadow", "report", "--metrics-file",
                                 str(work / "metrics.txt")], capture_output=True, text=True, check=True).stdout  # fmt: skip
        offline_p = {
            args.primary.name: offline(args.primary, args.test, work),
            args.shadow.name: offline(args.shadow, args.test, work),
        }
    latency = {name: {f"p{q}_ms": float(np.percentile(t, q) * 1e3) for q in (50, 90, 99)} for name, t in times.items()}
    payload = {
        "primary": args.primary.name, "shadow": args.shadow.name, "k": args.k, "documents": n, "blocks": args.blocks,
        "feedback_stored": stored, "pair": pair, "report": report, "offline": offline_p, "latency": latency,
    }  # fmt: skip
    if fractions is None:
        payload["p50_with_over_without"] = latency["with shadow"]["p50_ms"] / latency["without"]["p50_ms"]
    else:
        payload["fractions"] = {
            name: {"fraction": shadowed[name], "pair": pairs[name],
                   "p50_over_without": latency[name]["p50_ms"] / latency["without"]["p50_ms"]}
            for name in shadowed
        }  # fmt: skip
    print(report)
    print(json.dumps({k: payload.get(k) for k in ("offline", "latency", "p50_with_over_without")}, indent=2))
    for name, row in payload.get("fractions", {}).items():
        print(f"{name}: p50 {row['p50_over_without']:.3f}x without a shadow")
    save_result(args.result_name, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
