"""What `"explain"` costs on /v1/predict: p50 with it off against the code before it (must be nothing), and with it on.

Three servers on loopback, one client each, over the same texts, interleaved round by round (the order rotated
each round, so that no configuration always runs right after another): --before-code's server (a folder
holding an `xtag` package: the commit before explanations, with models/, training/, evaluation/, service/
linked under xtag/, as bench/service_load.py's --server-code), and this checkout's server asked without and
with `"explain": true`. Also timed in-process: the explainer alone for one text (models/explain/linear.py, or a LaMP
bundle's models/explain/lamp.py), and the response sizes. For a LaMP bundle also what its graph's attention
outputs cost a plain prediction (onnxruntime runs every node whatever outputs are fetched): the re-ranker's
logits from its graph against the same graph cut to the logits (the graph of bundles exported before them). On a shared machine compare the figures of one run (the load average is recorded): under
load a longer CPU burst is more often preempted, so the client-side difference overstates what explaining
costs; the server's own `took_ms` (handler time) is recorded beside it.

    .venv/bin/python -m bench.explain_latency --bundle /tmp/explain/bundle-xl \\
        --test ../shared/data/debtags/test.jsonl.gz --before-code /tmp/explain-oldcode
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.models.bundle.loader import load_bundle
from xtag.models.explain.select import explainer_for

from bench.helpers.results import save_result
from bench.helpers.server import Conn, free_port, start_server


async def sequential(port: int, bodies: list[bytes]) -> tuple[np.ndarray, np.ndarray, int]:
    """Each body once over one keep-alive connection, one at a time: per-request seconds at the client, the
    server's own `took_ms` (handler time: parse, predict, explain, build), and the bytes received."""
    conn = await Conn.open(port)
    times, took, received = np.zeros(len(bodies)), np.zeros(len(bodies)), 0
    try:
        for i, body in enumerate(bodies):
            t = time.perf_counter()
            status, answer = await conn.request("POST", "/v1/predict", body)
            times[i] = time.perf_counter() - t
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {answer[:200]!r}")
            received += len(answer)
            took[i] = json.loads(answer)["took_ms"]
    finally:
        conn.close()
    return times, took, received


def in_process(bundle: Path, texts: list[str], k: int) -> dict:
    """The explainer for one text and its k labels, after a first call that builds the term table."""
    predictor = load_bundle(bundle).predictor
    explainer = explainer_for(predictor)
    labels = [[[int(j) for j in predictor.predict([t], k=k).labels[0] if j >= 0]] for t in texts]
    explainer.explain(texts[:1], labels[0])
    times = []
    for text, row in zip(texts, labels):
        t = time.perf_counter()
        explainer.explain([text], row)
        times.append(time.perf_counter() - t)
    return {"p50": float(np.percentile(times, 50) * 1e3), "p99": float(np.percentile(times, 99) * 1e3)}


def graph_outputs_cost(bundle: Path, texts: list[str], k: int, rounds: int) -> dict:
    """A LaMP re-ranker's logits for one text at a time from its graph (logits fetched alone, as predictions do)
    against the same graph cut to the logits: per-text p50 of each, alternating round by round."""
    import tempfile

    import onnx
    from onnx.utils import Extractor
    from xtag.models.lamp.model import LampReranker

    model = load_bundle(bundle).predictor.model
    with tempfile.TemporaryDirectory() as tmp:
        cut = Path(tmp)
        for f in (bundle / "lamp").iterdir():
            (cut / f.name).write_bytes(f.read_bytes())
        graph = onnx.load(str(cut / "model.onnx"))
        onnx.save(
            Extractor(graph).extract_model([i.name for i in graph.graph.input], ["logits"]), str(cut / "model.onnx")
        )
        rerankers = {"with attention outputs": model.reranker, "logits only": LampReranker.load(cut)}
        cands = [model.candidates([t], k, None) for t in texts]
        times = {name: [] for name in rerankers}
        for r in range(rounds):
            for name in list(rerankers)[r % 2 :] + list(rerankers)[: r % 2]:
                for text, cand in zip(texts, cands):
                    t = time.perf_counter()
                    rerankers[name].logits([text], cand.labels, cand.scores)
                    times[name].append(time.perf_counter() - t)
    p50 = {name: float(np.percentile(v, 50) * 1e3) for name, v in times.items()}
    return {"p50_ms": p50, "added_p50_ms": p50["with attention outputs"] - p50["logits only"], "texts": len(texts)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True, help="texts to send (a corpus)")
    ap.add_argument(
        "--before-code",
        type=Path,
        default=None,
        help="a folder holding the older `xtag` package (leave out to time this code's off and on only)",
    )
    ap.add_argument("--requests", type=int, default=300, help="per configuration and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--result-name", default="explain_latency_debtags")
    args = ap.parse_args()

    texts = load_corpus(args.test, "auto", need_labels=False).texts[: args.requests]
    plain = [json.dumps({"text": t, "k": args.k}).encode() for t in texts]
    explained = [json.dumps({"text": t, "k": args.k, "explain": True}).encode() for t in texts]
    configs = {"before": ("before", plain)} if args.before_code else {}
    configs |= {"explain off": ("this", plain), "explain on": ("this", explained)}
    servers = {}
    try:
        code = {"before": args.before_code, "this": None}
        for name in dict.fromkeys(server for server, _ in configs.values()):  # each server the configs ask for
            port = free_port()
            servers[name] = (port, start_server(args.bundle, port, "on", code[name]))
        for port, _ in servers.values():  # warm-up: the first requests (and the explainer's term table) apart
            asyncio.run(sequential(port, explained[:20] if port == servers["this"][0] else plain[:20]))
        p50s = {name: [] for name in configs}
        took_p50s = {name: [] for name in configs}
        all_times = {name: [] for name in configs}
        sizes = {}
        for r in range(args.rounds):
            order = list(configs)[r % len(configs) :] + list(configs)[: r % len(configs)]
            for name in order:
                server, bodies = configs[name]
                times, took, received = asyncio.run(sequential(servers[server][0], bodies))
                p50s[name].append(float(np.percentile(times, 50) * 1e3))
                took_p50s[name].append(float(np.percentile(took, 50)))
                all_times[name].append(times)
                sizes[name] = received / len(bodies)
            print(f"round {r + 1}: " + ", ".join(f"{n} {p50s[n][-1]:.3f} ms" for n in configs), file=sys.stderr)
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(30)
    figures = {
        name: {
            "p50_ms": float(np.median(p50s[name])),
            "p50_ms_per_round": [round(x, 4) for x in p50s[name]],
            "p99_ms": float(np.percentile(np.concatenate(all_times[name]), 99) * 1e3),
            "server_took_p50_ms": float(np.median(took_p50s[name])),
            "response_bytes": round(sizes[name]),
        }
        for name in configs
    }
    paired_on = np.array(p50s["explain on"]) - np.array(p50s["explain off"])
    result = {
        "bundle": args.bundle.name,
        "corpus": str(args.test),
        "k": args.k,
        "requests_per_round": len(texts),
        "rounds": args.rounds,
        "http": figures,
        "on_minus_off_p50_ms": {"median": float(np.median(paired_on)), "per_round": paired_on.round(4).tolist()},
        "in_process_explain_ms": in_process(args.bundle, texts, args.k),
    }
    if args.before_code:
        paired_off = np.array(p50s["explain off"]) - np.array(p50s["before"])
        result["off_minus_before_p50_ms"] = {
            "median": float(np.median(paired_off)),
            "per_round": paired_off.round(4).tolist(),
        }
    if (args.bundle / "lamp").is_dir():
        result["lamp_attention_outputs_plain_cost"] = graph_outputs_cost(args.bundle, texts, args.k, args.rounds)
    print(json.dumps(result, indent=1))
    save_result(args.result_name, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
