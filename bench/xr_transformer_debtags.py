"""XR-Linear vs frozen-encoder vs fine-tuned XR-Transformer on debtags, one run, same TF-IDF.

    .venv/bin/python bench/xr_transformer_debtags.py --data ../shared/data/debtags --max-length 128 \
        --finetune-steps 60

Every variant goes through the product path: `train_run` → `export_run` (ONNX encoder, FAISS
shortlist) → `load_bundle` → `evaluate_bundle`, so the accuracy figures are those of the served
bundle (onnxruntime), not of the torch model. Also reports ONNX vs torch parity, single-text
encoder latency (p50, exactly 128 tokens) for both, the int8 encoder's accuracy cost, and the
predictor's overhead over the bare ONNX encoder. Results: <workdir>/results.json.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from models.bundle import load_bundle
from models.errors import XtagError
from training.config import TrainConfig, XRExportConfig, XRTransformerConfig
from training.data import load_corpus
from training.evaluate import evaluate_bundle
from training.export import export_run
from training.run import train_run
from training.tree import TreeConfig
from training.xlinear import XLinearConfig

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("P@1", "P@3", "P@5", "PSP@1", "PSP@3", "PSP@5")
LATENCY_TOKENS = 128


def subset(src: Path, dst: Path, limit: int | None) -> Path:
    """The corpus itself, or its first `limit` rows (smoke runs of this script)."""
    if limit is None:
        return src
    with gzip.open(src, "rt") as fh, open(dst, "w") as out:
        for i, line in enumerate(fh):
            if i >= limit:
                break
            out.write(line)
    return dst


def run_variant(name: str, config: TrainConfig, work: Path, seed_from: Path | None, quantize: bool) -> dict:
    """Train (reusing θ0 embeddings of the frozen run when given), export, and report timings."""
    run, bundle = work / f"{name}-run", work / f"{name}-bundle"
    resume = (run / "model").is_dir()
    if seed_from is not None and not resume:  # same θ0 embeddings the frozen run computed: a resume cache hit
        (run / "checkpoints" / "xr").mkdir(parents=True, exist_ok=True)
        config.save(run / "config.json")
        shutil.copyfile(seed_from, run / "checkpoints" / "xr" / "emb_0.npy")
        resume = True
    start = time.perf_counter()
    summary = train_run(config, run, resume=resume, progress=True)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    manifest = export_run(run, bundle, overwrite=True)
    out = {"train_seconds_this_invocation": round(train_s, 1), "summary": summary,
           "export_seconds": round(time.perf_counter() - start, 1), "export": manifest.get("export")}
    if quantize:
        int8 = config.model_copy(deep=True)
        int8.xr_transformer.export.quantize = True
        int8.save(run / "config.json")
        try:
            out["int8_export"] = export_run(run, work / f"{name}-int8-bundle", overwrite=True).get("export")
        finally:
            config.save(run / "config.json")
    return out


def log_seconds(run: Path) -> dict:
    """Stage times from the run's train_log.jsonl (fine-tuning, encoding, rankers)."""
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    out = {"encode_seconds": sum(e["seconds"] for e in events if e["event"] == "encode"),
           "finetune_seconds": sum(e["seconds"] for e in events if e["event"] == "finetune_level"),
           "bootstrap_seconds": sum(e["seconds"] for e in events if e["event"] == "bootstrap"),
           "ranker_seconds": sum(e["seconds"] for e in events if e["event"] in ("tree", "level"))}
    steps = [e for e in events if e["event"] == "finetune_level"]
    out["finetune_steps"] = [e["steps"] for e in steps]
    return out


def latencies(run: Path, bundle: Path, texts: list[str], n: int) -> dict:
    """p50 single-text encoder latency at exactly 128 tokens: torch vs onnxruntime; predictor overhead."""
    import torch

    from models.encoder import load_trained
    from models.onnx_encoder import OnnxEncoder, TextTokenizer

    torch_enc, _ = load_trained(run / "model" / "encoder")
    torch_enc.eval()
    onnx = OnnxEncoder.load(bundle / "encoder")
    tok = TextTokenizer.load(bundle / "encoder" / "tokenizer.json", LATENCY_TOKENS)
    long = [t for t in texts if len(tok.tokenizer.encode(t).ids) >= LATENCY_TOKENS][:n]
    onnx.tokenizer = tok  # measure at 128 tokens even if the model was trained shorter
    predictor = load_bundle(bundle).predictor
    predictor.featurizer.encoder.tokenizer = tok
    exact = load_bundle(bundle).predictor
    exact.featurizer.encoder.tokenizer = tok
    exact.model.first_level = None  # the same bundle scoring level 1 by full scan instead of FAISS
    encoded = [tok([text]) for text in long]

    class CachedEncoder:  # the predictor minus the encoder: embeddings looked up, everything else real
        dim = onnx.dim
        cache = {text: onnx.encode([text]) for text in long}

        def encode(self, texts: list[str]) -> np.ndarray:
            return np.vstack([self.cache[t] for t in texts])

    rest = load_bundle(bundle).predictor
    rest.featurizer.encoder = CachedEncoder()
    calls = {  # one method at a time: interleaving lets one runtime's spinning threads slow the next
        "torch": lambda i: torch_enc(torch.from_numpy(encoded[i][0]), torch.from_numpy(encoded[i][1])),
        "onnx": lambda i: onnx.encode([long[i]]),
        "predict": lambda i: predictor.predict([long[i]], k=5),
        "predict_no_faiss": lambda i: exact.predict([long[i]], k=5),
        "predict_without_encoder": lambda i: rest.predict([long[i]], k=5),
    }
    times: dict[str, list[float]] = {}
    with torch.inference_mode():
        for name, call in calls.items():
            for i in range(min(5, len(long))):  # warm-up
                call(i)
            times[name] = []
            for i in range(len(long)):
                t = time.perf_counter()
                call(i)
                times[name].append(time.perf_counter() - t)
    p50 = {k: float(np.median(v) * 1e3) for k, v in times.items()}
    return {"texts": len(long), "tokens": LATENCY_TOKENS, "torch_p50_ms": p50["torch"], "onnx_p50_ms": p50["onnx"],
            "predict_p50_ms": p50["predict"], "predict_overhead_over_onnx_ms": p50["predict"] - p50["onnx"],
            "predict_no_faiss_p50_ms": p50["predict_no_faiss"],
            "predict_without_encoder_p50_ms": p50["predict_without_encoder"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "debtags")
    ap.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out" / "xr_transformer")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs per level (capped by --finetune-steps)")
    ap.add_argument("--finetune-steps", type=int, default=60, help="max optimiser steps per fine-tuning level")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="first N rows of each split (smoke runs)")
    ap.add_argument("--latency-texts", type=int, default=100)
    ap.add_argument("--variants", default="xlinear,frozen,finetuned")
    ap.add_argument("--latency-only", action="store_true", help="re-measure latencies of existing bundles")
    args = ap.parse_args()
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    train_path = subset(args.data / "train.jsonl.gz", work / "train.jsonl", args.limit)
    test_path = subset(args.data / "test.jsonl.gz", work / "test.jsonl", args.limit)
    test = load_corpus(test_path)
    xlinear = XLinearConfig(n_jobs=args.threads)
    xr = XRTransformerConfig(max_length=args.max_length, batch_size=args.batch_size, device="cpu",
                             tree=TreeConfig(branching=32, max_leaf_size=32), export=XRExportConfig())
    def config_of(name: str) -> TrainConfig:
        """xlinear, frozen, finetuned (--finetune-steps per level) or finetuned-N (N steps per level)."""
        if name == "xlinear":
            return TrainConfig(corpus=train_path, model="xlinear", xlinear=xlinear)
        if name == "frozen":
            return TrainConfig(corpus=train_path, model="xr-transformer", xlinear=xlinear,
                               xr_transformer=xr.model_copy(update={"epochs": 0}))
        steps = int(name.split("-")[1]) if "-" in name else args.finetune_steps
        return TrainConfig(corpus=train_path, model="xr-transformer", xlinear=xlinear,
                           xr_transformer=xr.model_copy(update={"epochs": args.epochs, "max_steps": steps}))
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    results_path = work / "results.json"
    if results_path.exists():
        results = {**json.loads(results_path.read_text()), "args": results["args"]}
    if args.latency_only:
        for name in args.variants.split(","):
            if name != "xlinear" and name in results:
                results[name]["latency"] = latencies(work / f"{name}-run", work / f"{name}-bundle", test.texts,
                                                     args.latency_texts)
                print(json.dumps({name: results[name]["latency"]}), flush=True)
        results_path.write_text(json.dumps(results, indent=2))
        return
    for name in args.variants.split(","):
        seed = work / "frozen-run" / "checkpoints" / "xr" / "emb_0.npy" if name.startswith("finetuned") else None
        entry = run_variant(name, config_of(name), work, seed if seed and seed.exists() else None,
                            quantize=name != "xlinear")
        bundle = load_bundle(work / f"{name}-bundle")
        start = time.perf_counter()
        metrics, _ = evaluate_bundle(bundle, test, progress=True)
        entry["eval_seconds"] = round(time.perf_counter() - start, 1)
        entry["metrics"] = {m: round(metrics[m], 2) for m in METRICS}
        if name != "xlinear":
            entry["stages"] = log_seconds(work / f"{name}-run")
            metrics8, _ = evaluate_bundle(load_bundle(work / f"{name}-int8-bundle"), test, progress=True)
            entry["int8_metrics"] = {m: round(metrics8[m], 2) for m in METRICS}
            entry["latency"] = latencies(work / f"{name}-run", work / f"{name}-bundle", test.texts,
                                         args.latency_texts)
        vocab = work / f"{name}-bundle" / "features" / "tfidf" / "vocabulary.json"
        entry["tfidf_sha256"] = hashlib.sha256(vocab.read_bytes()).hexdigest()[:16]
        results[name] = entry
        results_path.write_text(json.dumps(results, indent=2))
        print(json.dumps({name: entry["metrics"]}), flush=True)
    shas = {v["tfidf_sha256"] for n, v in results.items() if n != "args"}
    if len(shas) > 1:
        raise XtagError(f"variants were trained on different TF-IDF vocabularies: {shas}")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
