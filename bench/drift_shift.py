"""Label drift on a real shift (issue 27's must-show): serve a bundle, send a corpus's texts, then only the texts
of one narrow topic, and read GET /v1/drift after each phase.

    .venv/bin/python -m bench.drift_shift --bundle bundles/debtags-xl \
        --corpus data/debtags/test.jsonl.gz --topic game::

Starts `xtag serve` (one worker, default XTAG_DRIFT_WINDOW) in a subprocess; phase 2 sends --topic-documents
texts, cycling through the corpus documents with a label starting with --topic (debtags' test split has only
152 game documents: 760 labels at k = 5 would be under 3 % of a window that the whole split fills to 29,550).
Prints JSON: divergence, band shares and top risers after each phase.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

XTAG = Path(sys.executable).with_name("xtag")


def send(url: str, texts: list[str], k: int) -> None:
    for i in range(0, len(texts), 256):
        docs = [{"text": t} for t in texts[i : i + 256]]
        r = httpx.post(url + "/v1/predict/batch", json={"documents": docs, "k": k}, timeout=120)
        r.raise_for_status()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--topic", default="game::", help="label prefix of the narrow topic")
    ap.add_argument("--topic-documents", type=int, default=2000, help="texts sent in the topic burst")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--top", type=int, default=10, help="risers and fallers to show")
    ap.add_argument("--port", type=int, default=18731)
    args = ap.parse_args()
    opener = gzip.open if args.corpus.suffix == ".gz" else open
    with opener(args.corpus, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    topic = [r["text"] for r in rows if any(x.startswith(args.topic) for x in r["labels"])]
    url = f"http://127.0.0.1:{args.port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("XTAG_")}
    server = subprocess.Popen([str(XTAG), "serve", str(args.bundle), "--port", str(args.port)], env=env)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        out = {"bundle": str(args.bundle), "corpus": str(args.corpus), "k": args.k, "topic": args.topic}
        send(url, [r["text"] for r in rows], args.k)
        out["after_corpus"] = httpx.get(url + "/v1/drift", params={"top": args.top}).json()
        burst = [topic[i % len(topic)] for i in range(args.topic_documents)]
        send(url, burst, args.k)
        out["after_topic"] = httpx.get(url + "/v1/drift", params={"top": args.top}).json()
        out["documents"] = {"corpus": len(rows), "topic_distinct": len(topic), "topic_sent": len(burst)}
        print(json.dumps(out, indent=1))
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
