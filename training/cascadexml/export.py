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
from xtag.training.onnx.optimize import set_precision
from xtag.training.onnx.parity import parity_gate

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

    def graph_outputs() -> dict[str, np.ndarray]:  # of the graph in `out` as it stands (fp32, then int8 / fp16)
        return dict(zip(names, CascadeXMLEncoder.load(out).transform(texts).levels))

    def top5(outputs: dict[str, np.ndarray]) -> np.ndarray:
        return model.predict(CascadeOutputs([outputs[n] for n in names]), k=5).labels

    with step(f"parity check, torch vs ONNX on {len(texts)} texts"):
        reference = dict(zip(names, torch_outputs(graph, tokenizer, texts).levels))
        onnx = graph_outputs()
    report = {"outputs": config.outputs, **parity_gate(config, len(texts), onnx, reference, top5)}
    if config.precision != "fp32":  # its cost: output drift and top-5 agreement with the fp32 graph
        report[config.precision] = set_precision(out, config.precision, graph_outputs, onnx, reference, top5)
    return report


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    """No TF-IDF in the bundle: the graph reads raw text."""
    copy_run_model(run_model, tmp, leave_out=("encoder", "features"))
    return export_cascadexml(run_model, tmp, config.cascadexml.export)
