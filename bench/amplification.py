"""What one request can buy (issue 38 item 1): the amplification batch and ordinary requests against a live server.

Starts this checkout's server on loopback (bench/service_latency.py's start_server) and sends, one at a time:
the amplification request (--documents texts of ~400 characters, k = the label count, beam_size 512,
explain: true; issue 38 used 256 documents, a 103 KB body) and the ordinary requests the cost budget must let
through (a 256-document batch at k=100, one text of a few thousand words explained at k=10, a plain
/v1/predict), then issue 47's: 10 texts of 99,000 characters (windows of the joined test texts) at k = the
label count, beam_size 512, explained (a 1 MB body); 256 texts of 3,900 characters reweighted (psp) at k 400;
Annif's suggest-batch of 256 texts at limit 400. For each: status, the server's CPU seconds (from /proc), wall
seconds, response bytes, the server's RSS growth, and a refusal's detail. Bounded: every request has a client
timeout (--timeout). With --before-code (a folder holding an older `xtag` package) that code serves instead.

    .venv/bin/python -m bench.amplification --bundle bundles/debtags-xl \\
        --test ../shared/data/debtags/test.jsonl.gz --documents 32 --port 18110
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import httpx
from xtag.corpus.files import load_corpus

from bench.helpers.results import save_result
from bench.helpers.server import cpu_seconds, start_server


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def sized(texts: list[str], chars: int) -> list[str]:
    """Each text repeated or cut to about `chars` characters (the issue's body: 256 texts in 103 KB)."""
    return [((t + " ") * (chars // max(len(t), 1) + 1))[:chars] for t in texts]


def send(client: httpx.Client, pid: int, path: str, body: dict) -> dict:
    """One request: status, server CPU s, wall s, response bytes, RSS growth (MB), and a refusal's detail."""
    raw = json.dumps(body).encode()
    cpu0, rss0, t0 = cpu_seconds(pid), rss_mb(pid), time.perf_counter()
    try:
        r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
        status, answer = r.status_code, r.content
    except httpx.TimeoutException:
        status, answer = "client timeout", b""
    out = {
        "body_bytes": len(raw),
        "status": status,
        "server_cpu_s": round(cpu_seconds(pid) - cpu0, 3),
        "wall_s": round(time.perf_counter() - t0, 3),
        "response_bytes": len(answer),
        "rss_growth_mb": round(rss_mb(pid) - rss0, 1),
    }
    if status != 200 and answer:
        out["detail"] = json.loads(answer).get("detail")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--documents", type=int, default=256, help="texts in the amplification batch (issue 38: 256)")
    ap.add_argument("--port", type=int, default=18110)
    ap.add_argument("--timeout", type=float, default=120.0, help="client timeout per request (s)")
    ap.add_argument("--result-name", default=None, help="save to bench/results/NAME.json")
    ap.add_argument("--before-code", type=Path, help="serve this folder's `xtag` package instead of the checkout's")
    args = ap.parse_args()
    texts = load_corpus(args.test, "auto", need_labels=False).texts
    n_labels = json.loads((args.bundle / "labels.json").read_text())
    n_labels = len(n_labels["names"] if isinstance(n_labels, dict) else n_labels)
    docs = sized(texts[: args.documents], 400)
    long_text = " ".join(texts[:400])
    long_text = " ".join(long_text.split()[:3000])
    cases = {
        "amplification": (
            "/v1/predict/batch",
            {
                "documents": [{"text": t} for t in docs],
                "k": n_labels,
                "beam_size": 512,
                "explain": True,
            },
        ),
        "batch 256 k=100": (
            "/v1/predict/batch",
            {"documents": [{"text": t} for t in sized(texts[:256], 400)], "k": 100},
        ),
        "one 3000-word text explained k=10": ("/v1/predict", {"text": long_text, "k": 10, "explain": True}),
        "plain predict": ("/v1/predict", {"text": texts[0], "k": 10}),
    }
    joined = " ".join(texts)
    k400 = min(400, n_labels)
    cases |= {
        "issue 47: 10 x 99,000 chars explained, k all, beam 512": (
            "/v1/predict/batch",
            {
                "documents": [{"text": (joined * 2)[i * 104_729 :][:99_000]} for i in range(10)],
                "k": n_labels,
                "beam_size": 512,
                "explain": True,
            },
        ),
        f"issue 47: 256 x 3,900 chars reweighted, k {k400}": (
            "/v1/predict/batch",
            {
                "documents": [{"text": t} for t in sized(texts[:256], 3900)],
                "k": k400,
                "reweight": {"scheme": "psp", "alpha": 0.5},
            },
        ),
        f"issue 47: Annif suggest-batch 256 x 400 chars, limit {k400}": (
            f"/v1/projects/{args.bundle.name}/suggest-batch?limit={k400}",
            {"documents": [{"text": t} for t in docs]},
        ),
    }
    proc = start_server(args.bundle, args.port, "true", args.before_code, XTAG_MAX_BATCH_DOCUMENTS="256")
    rows = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{args.port}", timeout=args.timeout) as client:
            for name, (path, body) in cases.items():
                rows[name] = send(client, proc.pid, path, body)
                print(f"{name}: {json.dumps(rows[name])}", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
    if args.result_name:
        code = "before" if args.before_code else "this checkout"
        save_result(
            args.result_name, {"bundle": str(args.bundle), "documents": args.documents, "code": code, "cases": rows}
        )


if __name__ == "__main__":
    main()
