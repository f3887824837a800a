"""How long costly requests hold the event loop (issue 38, item 2): /health latency while they run.

Starts `xtag serve` (bench/service_latency.py's start_server) on 127.0.0.1, polls /health every ~10 ms
from a thread on a keep-alive connection, and meanwhile sends, one at a time:

- `explain`: one text of ~99K characters (test texts joined) with `explain: true` and k = the label count;
- `form`: Annif's url-encoded suggest with a ~2 MB body of 250,000 fields;
- `form_max_fields`: the same with 1,000 fields (the default XTAG_MAX_FORM_FIELDS) of ~2 KB each, a 60K-char text;
- `plain_max`: a plain /v1/predict of a text at XTAG_MAX_TEXT_CHARS (the inline path's worst case), k=10,
  after a warm-up request, so that a sequential client's request would be inlined.

Per phase: the max and p99 of /health (ms) and the heavy request's own latency and status. Last, a
sequential client's /v1/predict p50 on ordinary test texts (k=5), /health not polled.

    .venv/bin/python bench/loop_stalls.py --bundle bundles/debtags-xl \\
        --test /work/shared/data/debtags/test.jsonl.gz --port 18210
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from pathlib import Path
from urllib.parse import quote_plus

import numpy as np
from service_latency import start_server
from xtag.training.data.corpus import load_corpus


class Poller(threading.Thread):
    """GET /health every `every` s on one keep-alive connection; keeps (start time, seconds) per answer."""

    def __init__(self, port: int, every: float = 0.01):
        super().__init__(daemon=True)
        self.port, self.every = port, every
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self.stop.is_set():
            t = time.perf_counter()
            conn.request("GET", "/health")
            conn.getresponse().read()
            self.samples.append((t, time.perf_counter() - t))
            time.sleep(self.every)
        conn.close()

    def between(self, lo: float, hi: float) -> np.ndarray:
        """ms of the polls that were in flight at some point in [lo, hi]."""
        return np.array([s * 1e3 for t, s in self.samples if t <= hi and t + s >= lo])


def post(port: int, path: str, body: bytes, content_type: str) -> tuple[int, float, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": content_type})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, time.perf_counter() - t, len(data)


def phase(poller: Poller, port: int, path: str, body: bytes, content_type: str, rounds: int, name: str) -> dict:
    stats, took, statuses, sizes = [], [], set(), set()
    for _ in range(rounds):
        time.sleep(0.3)  # a quiet spell between rounds
        lo = time.perf_counter()
        status, seconds, size = post(port, path, body, content_type)
        hi = time.perf_counter()
        time.sleep(0.2)  # the poll in flight when the request ended has its answer by now
        stats.append(poller.between(lo, hi))
        took.append(seconds * 1e3)
        statuses.add(status)
        sizes.add(size)
    health = np.concatenate(stats)
    out = {
        "health_max_ms": round(float(health.max()), 2),
        "health_p99_ms": round(float(np.percentile(health, 99)), 2),
        "health_polls": len(health),
        "request_ms": [round(x, 1) for x in took],
        "status": sorted(statuses),
        "response_bytes": sorted(sizes),
    }
    print(name, json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--port", type=int, default=18210)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sequential", type=int, default=400, help="requests of the p50 phase")
    args = ap.parse_args()
    texts = load_corpus(args.test).texts
    joined = " ".join(texts)
    long_text = joined[:99_000]
    max_text = (joined * 2)[:100_000]
    proc = start_server(args.bundle, args.port, "true")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
        conn.request("GET", "/v1/projects")
        pid = json.loads(conn.getresponse().read())["projects"][0]["project_id"]
        conn.request("GET", "/v1/labels?limit=1")
        n_labels = json.loads(conn.getresponse().read()).get("total", 595)
        conn.close()
        form = b"text=python+library&" + b"&".join(b"%x=" % i for i in range(250_000))
        poller = Poller(args.port)
        poller.start()
        time.sleep(0.5)
        results = {
            "explain": phase(
                poller,
                args.port,
                "/v1/predict",
                json.dumps({"text": long_text, "k": n_labels, "explain": True}).encode(),
                "application/json",
                args.rounds,
                f"explain ({len(long_text)} chars, k={n_labels})",
            ),
            "form": phase(
                poller,
                args.port,
                f"/v1/projects/{pid}/suggest",
                form,
                "application/x-www-form-urlencoded",
                args.rounds,
                f"form ({len(form)} bytes, 250001 fields)",
            ),
        }
        padded = (
            b"text="
            + quote_plus(long_text[:60_000]).encode()
            + b"".join(b"&f%d=%s" % (i, b"x" * 1900) for i in range(999))
        )
        results["form_max_fields"] = phase(
            poller,
            args.port,
            f"/v1/projects/{pid}/suggest",
            padded,
            "application/x-www-form-urlencoded",
            args.rounds,
            f"form ({len(padded)} bytes, 1000 fields)",
        )
        plain = json.dumps({"text": max_text, "k": 10}).encode()
        post(args.port, "/v1/predict", plain, "application/json")  # a lone request: the next ones may be inlined
        results["plain_max"] = phase(
            poller, args.port, "/v1/predict", plain, "application/json", args.rounds, "plain 100,000 chars, k=10"
        )
        poller.stop.set()
        poller.join()
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=60)
        times = []
        for i in range(args.sequential):
            body = json.dumps({"text": texts[i % len(texts)], "k": 5})
            t = time.perf_counter()
            conn.request("POST", "/v1/predict", body=body, headers={"Content-Type": "application/json"})
            conn.getresponse().read()
            times.append(time.perf_counter() - t)
        conn.close()
        results["predict_p50_ms"] = round(float(np.median(times[50:])) * 1e3, 3)
        print("sequential /v1/predict p50 ms", results["predict_p50_ms"], flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
