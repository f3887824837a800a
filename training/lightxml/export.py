"""LightXML run → bundle: encoder + generator + bottleneck as one ONNX graph (fused, optionally int8 or fp16:
training/onnx/optimize.py), parity-checked against torch.

The graph returns `cluster_scores` (generator logits) and `bottleneck` (σ(W_h e + b_h)) for
dynamic batch and sequence axes; label embeddings and clusters stay numpy (models/lightxml/),
in a FAISS index from `faiss_min_labels` labels. Export fails when ONNX and torch differ by more
than `parity_tolerance` on either output (training/onnx/parity.py's gate); the report also gives the
top-5 agreement of the two.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xtag.models.lightxml.model import OUTPUTS, LightXMLEncoder, LightXMLModel
from xtag.training.config import TrainConfig
from xtag.training.export.steps import copy_run_model, step
from xtag.training.lightxml.config import LightXMLExportConfig
from xtag.training.lightxml.result import LIGHTXML_NET
from xtag.training.onnx.graph import write_graph
from xtag.training.onnx.optimize import check_graph


def export_lightxml(run_model: Path, tmp: Path, config: LightXMLExportConfig) -> dict:
    """Write tmp/encoder/{model.onnx, tokenizer.json, config.json} and the label index; return the parity report."""
    import torch
    from xtag.training.lightxml.validation import net_outputs

    run_encoder = run_model / "encoder"
    with step("loading the trained LightXML net"):
        net, enc_config = LIGHTXML_NET.load_run_net(run_encoder)
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

    def torch_outputs() -> dict[str, np.ndarray]:
        return vars(net_outputs(net, tokenizer, texts, torch.device("cpu"), amp=False))

    report = check_graph(out, texts, list(OUTPUTS), LightXMLEncoder, model, torch_outputs, config)
    return {"label_index": "faiss" if model.labels.index is not None else "numpy", **report}


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    """No TF-IDF in the bundle: the graph reads raw text."""
    copy_run_model(run_model, tmp, leave_out=("encoder", "features"))
    return export_lightxml(run_model, tmp, config.lightxml.export)
