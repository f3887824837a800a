"""Service latency on loopback vs in-process inference, batch throughput, and the reweighting trade-off table.

Starts `xtag serve`'s server (xtag.service.server.serve, uvicorn + httptools/uvloop when installed) in a
subprocess on 127.0.0.1 and talks to it with a minimal keep-alive HTTP/1.1 client on raw asyncio
streams, so that client cost stays small next to the server's. In the same run it times
`Predictor.predict` in-process on the same texts, each text in-process then over HTTP back to back.
HTTP overhead = p50(HTTP) − p50(in-process); on a shared machine it includes waiting for a CPU, so
the server's CPU time per request (from /proc) is printed beside it. The server runs twice, with
micro-batching off and on (the default).

    .venv/bin/python -m bench.service_latency --bundle bundles/svc-dev --test ../shared/data/debtags/test.jsonl.gz

With --pecos WORKDIR (a bench/xlinear_vs_pecos.py workdir; its xtag_bundle as --bundle) it runs instead the batch
comparison of issue 28 (batch_vs_pecos): `/v1/predict/batch` over HTTP against PECOS in-process with TF-IDF,
interleaved round by round, with --before-code DIR serving an older checkout beside this one:

    .venv/bin/python -m bench.service_latency --bundle bench/out/xlinear_vs_pecos_debdeps/xtag_bundle \\
        --test ../shared/data/debdeps/test.jsonl.gz --pecos bench/out/xlinear_vs_pecos_debdeps \\
        --before-code /tmp/old --rounds 9 --result-name service_batch_debdeps
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import ground_truth
from xtag.models.bundle.loader import load_bundle
from xtag.models.inference.reweighting import SCHEMES, candidate_budget, gains_for, label_weights, rerank
from xtag.models.metrics import evaluate

from bench.helpers.results import save_result
from bench.helpers.server import ROOT, Conn, _clients, cpu_seconds, free_port, ms, start_server

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
PECOS_PY = ROOT / "bench" / ".venv-pecos" / "bin" / "python"


def tree_cpu_seconds(pid: int) -> float:
    """cpu_seconds of a process and its live descendants (`xtag serve --workers N`: the workers are children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while listed
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_seconds(p)
        except OSError:
            continue
        todo += children.get(p, [])
    return total


async def _paired(
    port: int, predictor, texts: list[str], bodies: list[bytes], k: int, cpu: list[float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One client; each text timed in-process and then over HTTP back to back, so machine load hits both alike."""
    conn = await Conn.open(port)
    inproc, http = np.zeros(len(texts)), np.zeros(len(texts))
    for i, (text, body) in enumerate(zip(texts, bodies)):
        t, c = time.perf_counter(), time.process_time()
        predictor.predict([text], k=k)
        inproc[i] = time.perf_counter() - t
        if cpu is not None:
            cpu.append(time.process_time() - c)
        t = time.perf_counter()
        status, _ = await conn.request("POST", "/v1/predict", body)
        http[i] = time.perf_counter() - t
        if status != 200:
            raise RuntimeError(f"HTTP {status} on /v1/predict")
    conn.close()
    return inproc, http


def latency(port: int, pid: int, predictor, texts: list[str], k: int, concurrency: int) -> dict:
    bodies = [json.dumps({"text": t, "k": k}).encode() for t in texts]
    asyncio.run(_paired(port, predictor, texts[:200], bodies[:200], k))  # warm up both sides
    cpu: list[float] = []
    server_cpu = cpu_seconds(pid)
    inproc, one = asyncio.run(_paired(port, predictor, texts, bodies, k, cpu))
    server_cpu = (cpu_seconds(pid) - server_cpu) / len(texts) * 1e3
    many, wall = asyncio.run(_clients(port, bodies, concurrency, "/v1/predict"))
    return {
        "requests": len(texts),
        "in_process_ms": {"p50": ms(inproc, 50), "p99": ms(inproc, 99)},
        "http_1_client_ms": {"p50": ms(one, 50), "p99": ms(one, 99)},
        f"http_{concurrency}_clients_ms": {"p50": ms(many, 50), "p99": ms(many, 99), "qps": len(texts) / wall},
        "http_overhead_p50_ms": ms(one, 50) - ms(inproc, 50),
        "http_overhead_paired_median_ms": float(np.median(one - inproc) * 1e3),
        "server_cpu_ms_per_request": server_cpu,
        "in_process_cpu_ms_per_predict": float(np.mean(cpu) * 1e3),
    }


def throughput(port: int, predictor, texts: list[str], k: int, batch: int) -> dict:
    chunks = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    bodies = [
        json.dumps({"documents": [{"id": i, "text": t} for i, t in enumerate(c)], "k": k}).encode() for c in chunks
    ]
    asyncio.run(_clients(port, bodies[:2], 1, "/v1/predict/batch"))
    s = time.perf_counter()
    for c in chunks:
        predictor.predict(c, k=k)
    inproc = time.perf_counter() - s
    _, wall = asyncio.run(_clients(port, bodies, 1, "/v1/predict/batch"))
    return {
        "documents": len(texts),
        "batch": batch,
        "http_docs_per_s": len(texts) / wall,
        "in_process_docs_per_s": len(texts) / inproc,
    }


def batch_contenders(args: argparse.Namespace) -> dict[str, tuple[Path | None, dict]]:
    """The servers batch_vs_pecos runs, by name: (code folder, None for this checkout; server environment)."""
    threads = {"XTAG_INFERENCE_THREADS": str(args.inference_threads)} if args.inference_threads is not None else {}
    ours = "this checkout" + (f", XTAG_INFERENCE_THREADS={args.inference_threads}" if threads else "")
    contenders = {ours: (None, threads)}
    if args.before_code:
        contenders["before"] = (args.before_code, threads)
    if args.also_inference_threads is not None:
        contenders[f"this checkout, XTAG_INFERENCE_THREADS={args.also_inference_threads}"] = (
            None,
            {"XTAG_INFERENCE_THREADS": str(args.also_inference_threads)},
        )
    return contenders


def http_batch_round(args: argparse.Namespace, servers: dict, bodies: list[bytes], n: int) -> tuple[dict, dict]:
    """Every server's docs/s over the test split, with one client and with --batch-clients; and its CPU ms per
    1,000 documents (the server's process tree)."""
    row, cpu = {}, {}
    for name, (port, proc) in servers.items():
        for clients in sorted({1, args.batch_clients}):
            key = f"http {name}" if clients == 1 else f"http {name}, {clients} clients"
            before = tree_cpu_seconds(proc.pid)
            _, wall = asyncio.run(_clients(port, bodies, clients, "/v1/predict/batch"))
            row[key] = n / wall
            cpu[f"{key} (server)"] = (tree_cpu_seconds(proc.pid) - before) / n * 1e6
    return row, cpu


def pecos_batch_round(args: argparse.Namespace, featurizer, texts: list[str], x_path: Path) -> tuple[dict, dict]:
    """PECOS's docs/s and CPU ms per 1,000 documents: predict alone (its own venv, one call over x_path), and
    with scikit-learn's and xtag's TF-IDF of the same texts, both timed here."""
    n = len(texts)
    start, c0 = time.perf_counter(), time.process_time()
    featurizer.vectorizer.transform(texts)
    sklearn_s, sklearn_cpu = time.perf_counter() - start, time.process_time() - c0
    start, c0 = time.perf_counter(), time.process_time()
    featurizer.transform(texts)
    xtag_s, xtag_cpu = time.perf_counter() - start, time.process_time() - c0
    done = subprocess.run(
        [str(PECOS_PY), "-m", "bench.peers.pecos_predict"]
        + ["--model", str(args.pecos / "pecos_model"), "--X", str(x_path), "--topk"]
        + [str(args.k), "--threads", str(args.threads)],
        check=True,
        capture_output=True,
        text=True,
    )
    peer = json.loads(done.stdout.strip().splitlines()[-1])
    predict_s, predict_cpu = peer["predict_s"][0], peer["predict_cpu_s"][0]
    row = {
        "pecos predict only": n / predict_s,
        "pecos + scikit-learn tf-idf": n / (predict_s + sklearn_s),
        "pecos + xtag tf-idf": n / (predict_s + xtag_s),
    }
    if args.batch_clients > 1:  # what a PECOS user overlapping TF-IDF with prediction could reach at best:
        # never faster than either part alone, nor than their summed CPU time spread over every core
        bound = max(predict_s, sklearn_s, (predict_cpu + sklearn_cpu) / (os.cpu_count() or 1))
        row["pecos + scikit-learn tf-idf, overlapped (bound)"] = n / bound
    cpu = {
        "pecos predict only": predict_cpu / n * 1e6,
        "pecos + scikit-learn tf-idf": (predict_cpu + sklearn_cpu) / n * 1e6,
        "pecos + xtag tf-idf": (predict_cpu + xtag_cpu) / n * 1e6,
    }
    return row, cpu


def batch_medians(rounds: list[dict]) -> tuple[dict, dict, dict]:
    """Median docs/s and CPU per contender over the rounds, and the median ratio of each server to each PECOS
    variant (ratios taken within a round, then their median)."""
    median = {k: float(np.median([row[k] for row in rounds])) for k in rounds[0] if isinstance(rounds[0][k], float)}
    median_cpu = {
        k: float(np.median([row["cpu_ms_per_1000_docs"][k] for row in rounds]))
        for k in rounds[0]["cpu_ms_per_1000_docs"]
    }
    contenders = [k for k in rounds[0] if k.startswith("http ")]
    peers = [k for k in rounds[0] if k.startswith("pecos +")]
    ratios = {f"{a} / {b}": float(np.median([row[a] / row[b] for row in rounds])) for a in contenders for b in peers}
    return median, median_cpu, ratios


def batch_vs_pecos(args: argparse.Namespace) -> dict:
    """`/v1/predict/batch` docs/s over HTTP (this checkout's server, and --before-code's) against PECOS in-process
    with TF-IDF, in rounds that run every contender once, so that all of them see the same machine load.

    One client sends the test split in `--batch`-document requests, one after the other (as throughput()); with
    --batch-clients N, N clients also send them concurrently (the server overlaps one request's TF-IDF with
    another's scoring), beside an upper bound for a PECOS user who overlaps the two parts likewise; with
    --workers W the servers run `xtag serve --workers W` (W processes, each its own TF-IDF and engine), and
    with --inference-threads T each process runs T predictor calls at once (XTAG_INFERENCE_THREADS;
    --also-inference-threads T2 adds this checkout's server with T2, e.g. 1, what was the default before).
    PECOS predicts the whole split in one call (its best case) with the model pecos_xlinear.py kept in
    --pecos (bench/peers/pecos_predict.py, its own venv); its docs/s include the TF-IDF of the same texts
    by the same featuriser, timed here in the same round twice: scikit-learn's transform (what a PECOS
    user runs) and xtag's own (models/features/tfidf.py, the one the service runs). In-process xtag
    (Predictor.predict per request-sized chunk, TF-IDF included) runs in each round too."""
    bundle = load_bundle(args.bundle)
    predictor, featurizer = bundle.predictor, bundle.predictor.featurizer
    texts = load_corpus(args.test).texts
    chunks = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    bodies = [
        json.dumps({"documents": [{"id": str(i), "text": t} for i, t in enumerate(c)], "k": args.k}).encode()
        for c in chunks
    ]
    X = featurizer.transform(texts)
    x_path = args.pecos / "X_service_batch.npz"
    sp.save_npz(x_path, X.astype(np.float32))
    suffix = f", {args.workers} workers" if args.workers > 1 else ""
    servers = {}
    try:
        for name, (code, env) in batch_contenders(args).items():
            port = free_port()
            servers[name + suffix] = (port, start_server(args.bundle, port, "on", code, args.workers, **env))
        for port, _ in servers.values():  # warm-up, over as many connections as the run uses (every worker)
            for clients in sorted({1, args.batch_clients}):
                asyncio.run(_clients(port, bodies[: 4 * clients], clients, "/v1/predict/batch"))
        predictor.predict(chunks[0], k=args.k)
        rounds = []
        for r in range(args.rounds):
            load = os.getloadavg()
            # CPU ms per 1,000 documents: what each costs, whatever the other sessions' load
            http_row, cpu = http_batch_round(args, servers, bodies, len(texts))
            row: dict = {"load_average": load, **http_row}
            start, c0 = time.perf_counter(), time.process_time()
            for c in chunks:
                predictor.predict(c, k=args.k)
            row["xtag in-process"] = len(texts) / (time.perf_counter() - start)
            cpu["xtag in-process"] = (time.process_time() - c0) / len(texts) * 1e6
            peer_row, peer_cpu = pecos_batch_round(args, featurizer, texts, x_path)
            row.update(peer_row)
            cpu.update(peer_cpu)
            rounds.append({**row, "cpu_ms_per_1000_docs": cpu})
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in row.items() if k != "load_average"))
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait(10)
        x_path.unlink(missing_ok=True)
    median, median_cpu, ratios = batch_medians(rounds)
    return {
        "bundle": str(args.bundle),
        "version": bundle.version,
        "test": str(args.test),
        "documents": len(texts),
        "batch": args.batch,
        "batch_clients": args.batch_clients,
        "workers": args.workers,
        "inference_threads": args.inference_threads,
        "also_inference_threads": args.also_inference_threads,
        "k": args.k,
        "pecos_threads": args.threads,
        "before_code": str(args.before_code) if args.before_code else None,
        "rounds": rounds,
        "median_docs_per_s": median,
        "median_ratios": ratios,
        "median_cpu_ms_per_1000_docs": median_cpu,
    }


def reweighting_table(bundle, corpus, k: int = 5) -> dict:
    """macro-R@k and P@k per scheme and alpha, candidates widened exactly as the service widens them.

    Under the XMC convention (models/metrics.py): test labels unseen in training are misses that count,
    macro-R@k averages over the labels of the test split."""
    p = bundle.predictor
    vocab = p.vocab
    truth = ground_truth(corpus, vocab)
    beam = p.model.config.beam_size
    plain = p.predict(corpus.texts, k=k, beam_size=beam)
    k_cand, wide_beam = candidate_budget(k, beam, p.n_labels)
    wide = p.predict(corpus.texts, k=k_cand, beam_size=wide_beam)
    table = {}
    for scheme in SCHEMES:
        w = label_weights(vocab.frequency_array, vocab.n_train_docs, scheme)
        for alpha in ALPHAS:
            labels = plain.labels if alpha == 0 else rerank(wide, gains_for(w, alpha), k)[0].labels
            m = evaluate(labels, truth.Y, (k,), convention=truth.convention)
            table[f"{scheme}@{alpha}"] = {"P@5": m[f"P@{k}"], "macro-R@5": m[f"macro-R@{k}"]}
    return {
        "candidates": k_cand,
        "beam": wide_beam,
        "default_beam": beam,
        "convention": truth.convention,
        "unseen_test_label_mentions": truth.unseen_mentions,
        "table": table,
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, default=ROOT / "bundles" / "svc-dev")
    ap.add_argument("--test", type=Path, default=ROOT.parent / "shared" / "data" / "debtags" / "test.jsonl.gz")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batch-clients", type=int, default=1, help="with --pecos: also N concurrent batch clients")
    ap.add_argument("--workers", type=int, default=1, help="with --pecos: serve with `xtag serve --workers N`")
    ap.add_argument(
        "--inference-threads", type=int, help="with --pecos: the servers' XTAG_INFERENCE_THREADS (default: unset)"
    )
    ap.add_argument("--also-inference-threads", type=int, help="with --pecos: also serve this checkout with this many")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--result-name", default="service_latency", help="bench/results/<name>.json")
    ap.add_argument(
        "--pecos",
        type=Path,
        help="instead of the latency runs: /v1/predict/batch against PECOS in-process with TF-IDF (batch_vs_pecos); "
        "a bench/xlinear_vs_pecos.py workdir, with the pecos_model it kept",
    )
    ap.add_argument("--before-code", type=Path, help="with --pecos: also serve this folder's `xtag` package")
    ap.add_argument("--rounds", type=int, default=5, help="with --pecos: rounds of every contender, interleaved")
    ap.add_argument("--threads", type=int, default=2, help="with --pecos: PECOS's prediction threads")
    return ap.parse_args()


def report_batch_vs_pecos(args: argparse.Namespace) -> None:
    out = batch_vs_pecos(args)
    for key, value in {**out["median_docs_per_s"], **out["median_ratios"]}.items():
        print(f"{key:<48}{value:>10,.2f}")
    for key, value in out["median_cpu_ms_per_1000_docs"].items():
        print(f"CPU ms per 1,000 docs, {key:<48}{value:>10,.0f}")
    save_result(args.result_name, out, benchmark="service_batch")


def measure_latency(args: argparse.Namespace, bundle, texts: list[str], all_texts: list[str]) -> dict:
    """latency() with the server's micro-batching off, then on (the default, where batch throughput is measured
    too), a fresh server each."""
    out = {
        "bundle": str(args.bundle),
        "version": bundle.version,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "latency": {},
    }
    for batching in ("off", "on"):
        port = free_port()
        server = start_server(args.bundle, port, batching)
        try:
            out["latency"][batching] = latency(port, server.pid, bundle.predictor, texts, args.k, args.concurrency)
            if batching == "on":  # the default configuration
                out["batch_throughput"] = throughput(port, bundle.predictor, all_texts, args.k, args.batch)
        finally:
            server.terminate()
            server.wait(10)
    return out


def print_latency(args: argparse.Namespace, bundle, out: dict, requests: int) -> None:
    c = args.concurrency
    print(
        f"bundle {args.bundle} ({bundle.version}), {requests} single-text requests, k={args.k}, "
        f"{os.cpu_count()} CPUs, load average before {out['load_average'][0]:.2f}"
    )
    print(f"{'':34}{'p50 ms':>10}{'p99 ms':>10}")
    for batching, lat in out["latency"].items():
        print(f"-- server micro-batching {batching}")
        print(
            f"{'  in-process Predictor.predict':34}{lat['in_process_ms']['p50']:10.3f}{lat['in_process_ms']['p99']:10.3f}"
        )
        print(
            f"{'  HTTP /v1/predict, 1 client':34}{lat['http_1_client_ms']['p50']:10.3f}"
            f"{lat['http_1_client_ms']['p99']:10.3f}"
        )
        many = lat[f"http_{c}_clients_ms"]
        print(
            f"{f'  HTTP /v1/predict, {c} clients':34}{many['p50']:10.3f}{many['p99']:10.3f}   ({many['qps']:.0f} req/s)"
        )
        print(
            f"  HTTP overhead p50: {lat['http_overhead_p50_ms']:.3f} ms "
            f"(median of paired differences {lat['http_overhead_paired_median_ms']:.3f} ms)"
        )
        print(
            f"  CPU per request: server {lat['server_cpu_ms_per_request']:.3f} ms vs in-process predict "
            f"{lat['in_process_cpu_ms_per_predict']:.3f} ms → {lat['server_cpu_ms_per_request'] - lat['in_process_cpu_ms_per_predict']:.3f} ms "
            f"of server work besides the prediction (independent of waiting for a CPU)"
        )
    thr = out["batch_throughput"]
    print(
        f"/v1/predict/batch ({thr['batch']} docs/request): {thr['http_docs_per_s']:.0f} docs/s over HTTP vs "
        f"{thr['in_process_docs_per_s']:.0f} docs/s in-process ({thr['documents']} docs)"
    )


def print_reweighting(args: argparse.Namespace, corpus, rw: dict) -> None:
    print(
        f"\nreweighting on {args.test.name}: {len(corpus)} docs, candidates k'={rw['candidates']}, "
        f"beam {rw['default_beam']}→{rw['beam']}  (P@5 / macro-R@5, %, {rw['convention']} convention)"
    )
    print(f"{'scheme':<14}" + "".join(f"{'α=' + str(a):>16}" for a in ALPHAS))
    for scheme in SCHEMES:
        cells = [rw["table"][f"{scheme}@{a}"] for a in ALPHAS]
        print(f"{scheme:<14}" + "".join(f"{c['P@5']:>8.2f}/{c['macro-R@5']:<7.2f}" for c in cells))


def main() -> None:
    args = parse_args()
    if args.pecos:
        report_batch_vs_pecos(args)
        return

    bundle = load_bundle(args.bundle)
    corpus = load_corpus(args.test)
    texts = corpus.texts[: args.requests]
    out = measure_latency(args, bundle, texts, corpus.texts)
    out["reweighting"] = rw = reweighting_table(bundle, corpus)
    print_latency(args, bundle, out, len(texts))
    print_reweighting(args, corpus, rw)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    save_result(
        args.result_name,
        {
            **out,
            "convention": rw["convention"],
            "requests": len(texts),
            "concurrency": args.concurrency,
            "k": args.k,
            "test_documents": len(corpus),
        },
    )


if __name__ == "__main__":
    main()
