"""Export: turn a finished run into a verified serving bundle (xr-transformer: ONNX encoder, FAISS shortlist;
lightxml: one ONNX graph + label embeddings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from models.bundle import load_bundle, load_featurizer, write_manifest
from models.errors import XtagError
from models.xlinear import XLinearModel
from training.config import TrainConfig, XRTransformerConfig


def _top_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Mean overlap of two top-k label lists (1.0 = same labels)."""
    return float(np.mean([len(set(x[x >= 0]) & set(y[y >= 0])) / max(len(x[x >= 0]), 1) for x, y in zip(a, b)]))


def _export_xr(run_model: Path, tmp: Path, xc: XRTransformerConfig) -> dict:
    """encoder/ as ONNX (parity-checked, optionally int8) and shortlist/ as FAISS, with their measured costs."""
    from models.shortlist import FaissShortlist, level1_recall
    from training.onnx_export import export_encoder, quantize

    if xc.features == "dense":
        shutil.rmtree(tmp / "features", ignore_errors=True)
    report, fp32, reference = export_encoder(run_model / "encoder", tmp / "encoder", xc.export)
    texts = json.loads((run_model / "encoder" / "sample_texts.json").read_text())
    model = XLinearModel.load(tmp)
    X = load_featurizer(tmp, "xr-transformer").transform(texts)
    if xc.export.quantize:  # accuracy cost: embedding drift and top-5 agreement with the fp32 encoder
        fp32_top = model.predict(X, k=5).labels
        report["int8"] = quantize(tmp / "encoder", texts[:len(fp32)], fp32, reference)
        X = load_featurizer(tmp, "xr-transformer").transform(texts)
        report["int8"]["top5_agreement_vs_fp32"] = _top_agreement(model.predict(X, k=5).labels, fp32_top)
        report["int8"]["agreement_texts"] = len(texts)
    nodes, min_nodes = model.levels[0].n_nodes, xc.export.shortlist_config.min_nodes
    if xc.export.shortlist and nodes < min_nodes:
        report["shortlist"] = {"skipped": f"level 1 has {nodes} nodes, fewer than min_nodes={min_nodes}: "
                                          f"exact scoring in the inference core is faster"}
    elif xc.export.shortlist:
        shortlist = FaissShortlist.build(model.levels[0], model.config.n_features, xc.export.shortlist_config)
        beam = model.config.beam_size
        shortlist.info.recall = level1_recall(shortlist, X, model.levels[0], beam)
        shortlist.info.recall_docs, shortlist.info.recall_beam = X.shape[0], beam
        shortlist.save(tmp / "shortlist")
        report["shortlist"] = json.loads(shortlist.info.model_dump_json())
    return report


def export_run(run: Path, out: Path, name: str | None = None, overwrite: bool = False,
               shortlist_min_nodes: int | None = None) -> dict:
    """Copy the run's final model into `out`, write the manifest, and load it back as a check.

    `shortlist_min_nodes` overrides the run's `export.shortlist_config.min_nodes` (xr-transformer):
    0 always writes the FAISS level-1 index.
    """
    model = run / "model"
    if not model.is_dir():
        raise XtagError(f"{run}: no finished model (train it first, or resume it)")
    if out.exists():
        if not overwrite:
            raise XtagError(f"{out}: already exists (use --overwrite)")
        shutil.rmtree(out)
    config = TrainConfig.load(run / "config.json")
    if shortlist_min_nodes is not None and config.xr_transformer is not None:
        config.xr_transformer.export.shortlist_config.min_nodes = shortlist_min_nodes
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    extra: dict = {}
    if config.model == "xr-transformer":
        shutil.copytree(model, tmp, ignore=lambda folder, names: ["encoder"] if Path(folder) == model else [])
        extra["export"] = _export_xr(model, tmp, config.xr_transformer)
    elif config.model == "lightxml":  # no TF-IDF in the bundle: the graph reads raw text
        from training.lightxml_export import export_lightxml

        shutil.copytree(model, tmp, ignore=lambda folder, names: ["encoder", "features"] if Path(folder) == model
                        else [])
        extra["export"] = export_lightxml(model, tmp, config.lightxml.export)
    else:
        shutil.copytree(model, tmp)
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    manifest = write_manifest(tmp, config.model, name or run.name, extra={
        "feature_config": {"tfidf": config.tfidf.model_dump()} if config.model != "lightxml" else {},
        "training": {"config": json.loads(config.model_dump_json()), "summary": summary},
        **extra,
    })
    load_bundle(tmp)  # refuse to publish a bundle that does not load
    tmp.rename(out)
    return manifest
