"""XR-Transformer export: the fine-tuned encoder as encoder/model.onnx (fused, parity-checked, optionally int8 or
fp16: training/onnx/optimize.py) and the level-1 rankers as a FAISS shortlist, with their measured costs in the
export report.

Pooling stays outside the graph (models/onnx_encoder.pool_numpy), as the bundle's encoder/config.json says.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn
from xtag.models.bundle.components import assemble, present
from xtag.models.features.onnx_encoder import OnnxEncoder
from xtag.models.xlinear.model import XLinearModel
from xtag.models.xlinear.shortlist import FaissShortlist, level1_recall
from xtag.training.config import TrainConfig
from xtag.training.deep.encoder import encode_texts, load_trained
from xtag.training.export.steps import copy_run_model, step
from xtag.training.onnx.graph import write_graph
from xtag.training.onnx.optimize import set_precision
from xtag.training.onnx.parity import parity_gate, top_agreement
from xtag.training.xr_transformer.config import XRExportConfig


class _HiddenStates(nn.Module):
    """The graph ONNX gets: token ids and mask in, last hidden states out."""

    def __init__(self, transformer: nn.Module):
        super().__init__()
        self.transformer = transformer

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def export_encoder(run_encoder: Path, out: Path, config: XRExportConfig) -> tuple[dict, np.ndarray, np.ndarray]:
    """Write out/{model.onnx, tokenizer.json, config.json}; fail when ONNX and torch disagree beyond tolerance
    (training/onnx/parity.parity_gate).

    Returns the report and the ONNX and torch embeddings of the parity texts (for `set_precision`).
    """
    with step("loading the fine-tuned encoder"):
        encoder, enc_config = load_trained(run_encoder, attn_implementation="eager")
    encoder.eval()
    tokenizer, texts = write_graph(
        _HiddenStates(encoder.transformer), run_encoder, out, enc_config, config, ["last_hidden_state"]
    )

    with step(f"parity check, torch vs ONNX on {len(texts)} texts"):
        reference = encode_texts(encoder, tokenizer, texts, 16, torch.device("cpu"))
        fp32 = OnnxEncoder.load(out).encode(texts)
    return parity_gate(config, len(texts), fp32, reference), fp32, reference


def _featurizer(bundle: Path):
    """Φ_cat as the bundle being written will serve it."""
    return assemble(bundle, present(bundle, ("tfidf", "text-encoder"))).featurizer


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    """The bundle's encoder/ as ONNX and shortlist/ as FAISS; returns the measured parity, int8 and recall."""
    xc = config.xr_transformer
    copy_run_model(run_model, tmp, leave_out=("encoder",) if xc.features == "tfidf+dense" else ("encoder", "features"))
    report, fp32, reference = export_encoder(run_model / "encoder", tmp / "encoder", xc.export)
    texts = json.loads((run_model / "encoder" / "sample_texts.json").read_text())
    model = XLinearModel.load(tmp)
    model.save_engine_layout(tmp / "rankers")
    X = _featurizer(tmp).transform(texts)
    precision = xc.export.precision
    if precision != "fp32":  # its cost: embedding drift and top-5 agreement with the fp32 encoder
        fp32_top = model.predict(X, k=5).labels
        parity = texts[: len(fp32)]
        report[precision] = set_precision(
            tmp / "encoder", precision, lambda: OnnxEncoder.load(tmp / "encoder").encode(parity), fp32, reference
        )
        X = _featurizer(tmp).transform(texts)
        report[precision]["top5_agreement_vs_fp32"] = top_agreement(model.predict(X, k=5).labels, fp32_top)
        report[precision]["agreement_texts"] = len(texts)
    nodes, min_nodes = model.levels[0].n_nodes, xc.export.shortlist_config.min_nodes
    if xc.export.shortlist and nodes < min_nodes:
        report["shortlist"] = {
            "skipped": f"level 1 has {nodes} nodes, fewer than min_nodes={min_nodes}: "
            f"exact scoring in the inference core is faster"
        }
    elif xc.export.shortlist:
        with step(f"FAISS shortlist index over {nodes} level-1 nodes"):
            shortlist = FaissShortlist.build(model.levels[0], model.config.n_features, xc.export.shortlist_config)
            beam = model.config.beam_size
            shortlist.info.recall = level1_recall(shortlist, X, model.levels[0], beam)
        shortlist.info.recall_docs, shortlist.info.recall_beam = X.shape[0], beam
        shortlist.save(tmp / "shortlist")
        report["shortlist"] = json.loads(shortlist.info.model_dump_json())
    return report
