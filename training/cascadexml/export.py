"""CascadeXML run → bundle: encoder + per-resolution features (or logits) as one ONNX graph (fused, optionally
int8 or fp16: training/onnx/optimize.py), parity-checked against torch.

The graph reads token ids and returns level_0 … level_{R-1}: each resolution's [CLS]-derived feature
(`outputs="features"`, the heads applied in numpy to the shortlisted nodes only) or its logits for the
whole level (`outputs="logits"`). Export fails when ONNX and torch differ by more than
`parity_tolerance` on any output (training/onnx/parity.py's gate); the report also gives the top-5
agreement of the two, and for int8 / fp16 weights their drift and top-5 agreement with the fp32 graph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xtag.models.cascadexml.model import CascadeOutputs, CascadeXMLEncoder, CascadeXMLModel, output_names
from xtag.training.cascadexml.config import CascadeXMLExportConfig
from xtag.training.cascadexml.net import LogitsGraph
from xtag.training.cascadexml.result import CASCADEXML_NET
from xtag.training.config import TrainConfig
from xtag.training.export.steps import copy_run_model, step
from xtag.training.onnx.graph import write_graph
from xtag.training.onnx.optimize import check_graph

EVAL_BATCH = 64


def torch_outputs(module, tokenizer, texts: list[str]) -> CascadeOutputs:
    """What the graph should return for `texts`: the torch module in eval mode, on CPU, in float32."""
    import torch
    from xtag.training.deep.encoder import run_batched

    return CascadeOutputs(list(run_batched(module, tokenizer, texts, EVAL_BATCH, torch.device("cpu"))))


def export_cascadexml(run_model: Path, tmp: Path, config: CascadeXMLExportConfig) -> dict:
    """Write tmp/encoder/{model.onnx, tokenizer.json, config.json}; return the parity (and precision) report."""
    run_encoder = run_model / "encoder"
    with step("loading the trained CascadeXML net"):
        net, enc_config = CASCADEXML_NET.load_run_net(run_encoder)
    graph = LogitsGraph(net) if config.outputs == "logits" else net
    names = output_names(len(net.sizes))
    out = tmp / "encoder"
    tokenizer, texts = write_graph(graph, run_encoder, out, enc_config, config, names)

    model = CascadeXMLModel.load(tmp)  # the run's numpy heads, told what this graph returns
    model.config = model.config.model_copy(update={"outputs": config.outputs})
    model.save(tmp)

    def reference() -> dict[str, np.ndarray]:
        return dict(zip(names, torch_outputs(graph, tokenizer, texts).levels))

    return {"outputs": config.outputs, **check_graph(out, texts, names, CascadeXMLEncoder, model, reference, config)}


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    """No TF-IDF in the bundle: the graph reads raw text."""
    copy_run_model(run_model, tmp, leave_out=("encoder", "features"))
    return export_cascadexml(run_model, tmp, config.cascadexml.export)
