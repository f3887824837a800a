"""How long costly requests hold the event loop (issue 38, item 2): /health latency while they run.

Starts `xtag serve` (bench/service_latency.py's start_server) on 127.0.0.1, polls /health every ~10 ms
from a thread on a keep-alive connection, and meanwhile sends, one at a time:

- `explain`: one text of ~99K characters (test texts joined) with `explain: true` and k = the label count;
- `explain_batch`: issue 47's batch, 10 such texts at k = the label count, beam_size 512, explained (about 1 MB;
  served only with --unbounded, which lifts XTAG_MAX_REQUEST_COST, _MEMORY_MB and XTAG_MAX_RESPONSE_BYTES);
- `form`: Annif's url-encoded suggest with a ~2 MB body of 250,000 fields;
- `form_max_fields`: the same with 1,000 fields (the default XTAG_MAX_FORM_FIELDS) of ~2 KB each, a 60K-char text;
- `plain_max`: a plain /v1/predict of a text at XTAG_MAX_TEXT_CHARS (the inline path's worst case), k=10,
  after a warm-up request, so that a sequential client's request would be inlined.

Per phase: the max and p99 of /health (ms) and the heavy request's own latency and status. Last, /health not
polled, a sequential client's /v1/predict p50 on ordinary test texts (k=5) and /v1/predict/batch documents per
second (256 test texts, k=10). With --before-code (a folder holding an older `xtag` package, e.g. made from
`git archive`), that code serves beside this checkout, and the p50 and batch blocks alternate between the two.

    .venv/bin/python -m bench.loop_stalls --bundle bundles/debtags-xl \\
        --test /work/shared/data/debtags/test.jsonl.gz --port 18210 --before-code /tmp/old/pkg
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
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import start_server


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


def stalls(port: int, long_text: str, max_text: str, rounds: int, phases: set[str]) -> dict:
    """The /health phases against the server on `port`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/v1/projects")
    pid = json.loads(conn.getresponse().read())["projects"][0]["project_id"]
    conn.request("GET", "/v1/labels?limit=1")
    n_labels = json.loads(conn.getresponse().read()).get("total", 595)
    conn.close()
    form = b"text=python+library&" + b"&".join(b"%x=" % i for i in range(250_000))
    padded = (
        b"text=" + quote_plus(long_text[:60_000]).encode() + b"".join(b"&f%d=%s" % (i, b"x" * 1900) for i in range(999))
    )
    suggest, encoded = f"/v1/projects/{pid}/suggest", "application/x-www-form-urlencoded"
    explain = json.dumps({"text": long_text, "k": n_labels, "explain": True}).encode()
    plain = json.dumps({"text": max_text, "k": 10}).encode()
    documents = [{"text": long_text[i * 7 :] + long_text[: i * 7]} for i in range(10)]  # 10 different texts
    explain_batch = json.dumps({"documents": documents, "k": n_labels, "beam_size": 512, "explain": True}).encode()
    poller = Poller(port)
    poller.start()
    time.sleep(0.5)
    try:
        results = {}
        if "explain_batch" in phases:
            results["explain_batch"] = phase(
                poller, port, "/v1/predict/batch", explain_batch, "application/json", rounds, "explain batch 10 x 99K"
            )
        if "explain" not in phases:
            return results
        results |= {
            "explain": phase(poller, port, "/v1/predict", explain, "application/json", rounds, f"explain k={n_labels}"),
            "form": phase(poller, port, suggest, form, encoded, rounds, f"form ({len(form)} bytes, 250001 fields)"),
            "form_max_fields": phase(
                poller, port, suggest, padded, encoded, rounds, f"form ({len(padded)} bytes, 1000 fields)"
            ),
        }
        post(port, "/v1/predict", plain, "application/json")  # a lone request: the next ones may be inlined
        results["plain_max"] = phase(
            poller, port, "/v1/predict", plain, "application/json", rounds, "plain 100,000 chars, k=10"
        )
    finally:
        poller.stop.set()
        poller.join()
    return results


def timed_block(port: int, path: str, bodies: list[bytes]) -> list[float]:
    """Seconds per request, sent one after another on one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for body in bodies:
        t = time.perf_counter()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        times.append(time.perf_counter() - t)
        assert r.status == 200, r.status
    conn.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--port", type=int, default=18210)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=6, help="blocks per server of the p50 and batch phases")
    ap.add_argument(
        "--before-code",
        type=Path,
        help="a folder holding an older `xtag` package: served beside this checkout, the two taking turns",
    )
    ap.add_argument("--no-stalls", action="store_true", help="only the p50 and batch blocks")
    ap.add_argument("--no-blocks", action="store_true", help="only the /health phases")
    ap.add_argument(
        "--phases", default="explain", help="explain (the single-text phases, as before) and/or explain_batch"
    )
    ap.add_argument("--unbounded", action="store_true", help="lift the cost, memory and answer-size bounds")
    ap.add_argument("--result-name", help="write bench/results/NAME.json")
    args = ap.parse_args()
    texts = load_corpus(args.test).texts
    joined = " ".join(texts)
    long_text, max_text = joined[:99_000], (joined * 2)[:100_000]
    ports = {"after": args.port}
    if args.before_code is not None:
        ports["before"] = args.port + 1
    unbounded = {"XTAG_MAX_REQUEST_COST": "0", "XTAG_MAX_RESPONSE_BYTES": "0"} if args.unbounded else {}
    procs = {name: start_server(args.bundle, port, "true", args.before_code if name == "before" else None,
                                **unbounded, **({"XTAG_MAX_REQUEST_MEMORY_MB": "0"} if unbounded and name == "after" else {}))
             for name, port in ports.items()}  # fmt: skip
    results: dict[str, dict] = {name: {} for name in ports}
    try:
        for name, port in ports.items():
            if not args.no_stalls:
                print(f"--- {name}", flush=True)
                results[name].update(stalls(port, long_text, max_text, args.rounds, set(args.phases.split(","))))
        if args.no_blocks:
            return
        singles = [json.dumps({"text": texts[i % len(texts)], "k": 5}).encode() for i in range(100)]
        batches = [
            json.dumps({"documents": [{"text": t} for t in texts[i * 256 : (i + 1) * 256]], "k": 10}).encode()
            for i in range(4)
        ]
        single_t = {name: [] for name in ports}
        batch_t = {name: [] for name in ports}
        for _ in range(args.blocks):  # the servers take turns, block by block
            for name, port in ports.items():
                single_t[name] += timed_block(port, "/v1/predict", singles)[10:]
                batch_t[name] += timed_block(port, "/v1/predict/batch", batches)
        for name in ports:
            results[name]["predict_p50_ms"] = round(float(np.median(single_t[name])) * 1e3, 3)
            results[name]["batch_docs_per_s"] = round(256 / float(np.median(batch_t[name])), 1)
            print(name, "p50", results[name]["predict_p50_ms"], "batch docs/s", results[name]["batch_docs_per_s"])
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(30)
        print(json.dumps(results))
        if args.result_name:
            save_result(args.result_name, results)


if __name__ == "__main__":
    main()
