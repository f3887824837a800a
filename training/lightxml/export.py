"""LightXML run → bundle: encoder + generator + bottleneck as one ONNX graph (fused, optionally int8 or fp16:
training/onnx/optimize.py), parity-checked against torch.

The graph returns `cluster_scores` (generator logits) and `bottleneck` (σ(W_h e + b_h)) for
dynamic batch and sequence axes; label embeddings and clusters stay numpy (models/lightxml/),
in a FAISS index from `faiss_min_labels` labels. Export fails when ONNX and torch differ by more
than `parity_tolerance` on either output; the report also gives the top-5 agreement of the two.
"""

from __future__ import annotations

import json
from pathlib import Path

from xtag.models.errors import XtagError
from xtag.models.lightxml.model import OUTPUTS, LightXMLEncoder, LightXMLModel
from xtag.models.onnx_encoder import EncoderConfig
from xtag.training.config import TrainConfig
from xtag.training.deep.checkpoint import load_heads
from xtag.training.exporting import copy_run_model, step
from xtag.training.lightxml.config import LightXMLExportConfig
from xtag.training.lightxml.net import LightXMLNet
from xtag.training.onnx.graph import write_graph
from xtag.training.onnx.optimize import set_precision
from xtag.training.onnx.parity import embedding_diff, top_agreement


def load_run_net(run_encoder: Path, attn_implementation: str | None = "eager") -> tuple[LightXMLNet, EncoderConfig]:
    """The trained torch net of a run's model/encoder (Hugging Face transformer + heads.safetensors)."""
    from xtag.training.deep.encoder import TextEncoder

    config = EncoderConfig.model_validate_json((run_encoder / "xtag_encoder.json").read_text())
    shape = json.loads((run_encoder / "lightxml_net.json").read_text())
    transformer = TextEncoder.from_pretrained(run_encoder, "cls", attn_implementation).transformer
    net = LightXMLNet(transformer, **shape)
    load_heads(net, run_encoder)
    return net.eval(), config


def export_lightxml(run_model: Path, tmp: Path, config: LightXMLExportConfig) -> dict:
    """Write tmp/encoder/{model.onnx, tokenizer.json, config.json} and the label index; return the parity report."""
    import torch
    from xtag.training.lightxml.validation import net_outputs

    run_encoder = run_model / "encoder"
    with step("loading the trained LightXML net"):
        net, enc_config = load_run_net(run_encoder)
    out = tmp / "encoder"
    tokenizer, texts = write_graph(net, run_encoder, out, enc_config, config, list(OUTPUTS))

    model = LightXMLModel.load(tmp)  # the run's numpy heads, re-saved with the export's FAISS threshold
    model = LightXMLModel(
        model.chain,
        model.labels.embeddings,
        model.config.model_copy(update={"faiss_min_labels": config.faiss_min_labels}),
    )
    with step("label index"):
        for name in ("label_embeddings.npy", "labels.faiss"):
            (tmp / "lightxml" / name).unlink(missing_ok=True)
        model.save(tmp)

    with step(f"parity check, torch vs ONNX on {len(texts)} texts"):
        reference = net_outputs(net, tokenizer, texts, torch.device("cpu"), amp=False)
        onnx = LightXMLEncoder.load(out).transform(texts)
        parity = {name: embedding_diff(getattr(onnx, name), getattr(reference, name)) for name in OUTPUTS}
    worst = max(p["max_abs_diff"] for p in parity.values())
    report = {
        "opset": config.opset,
        "parity_texts": len(texts),
        "parity_tolerance": config.parity_tolerance,
        "parity": parity,
        "label_index": "faiss" if model.labels.index is not None else "numpy",
        "top5_agreement_vs_torch": top_agreement(model.predict(onnx, k=5).labels, model.predict(reference, k=5).labels),
    }
    if not worst <= config.parity_tolerance:
        raise XtagError(
            f"ONNX graph differs from torch by {worst:.3g} on {len(texts)} texts "
            f"(tolerance {config.parity_tolerance}); refusing to export"
        )
    if config.precision != "fp32":  # its cost: output drift and top-5 agreement with the fp32 graph
        report[config.precision] = set_precision(
            out,
            config.precision,
            lambda: vars(LightXMLEncoder.load(out).transform(texts)),
            vars(onnx),
            vars(reference),
        )
        lower = LightXMLEncoder.load(out).transform(texts)
        agreement = top_agreement(model.predict(lower, k=5).labels, model.predict(onnx, k=5).labels)
        report[config.precision]["top5_agreement_vs_fp32"] = agreement
    return report


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    """No TF-IDF in the bundle: the graph reads raw text."""
    copy_run_model(run_model, tmp, leave_out=("encoder", "features"))
    return export_lightxml(run_model, tmp, config.lightxml.export)
