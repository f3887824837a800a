"""CascadeXML run → bundle: encoder + per-resolution features (or logits) as one ONNX graph, parity-checked.

The graph reads token ids and returns level_0 … level_{R-1}: each resolution's [CLS]-derived feature
(`outputs="features"`, the heads applied in numpy to the shortlisted nodes only) or its logits for the
whole level (`outputs="logits"`). Export fails when ONNX and torch differ by more than
`parity_tolerance` on any output; the report also gives the top-5 agreement of the two.
"""

from __future__ import annotations

import json
from pathlib import Path

from xtag.models.cascadexml.model import CascadeOutputs, CascadeXMLEncoder, CascadeXMLModel, output_names
from xtag.models.errors import XtagError
from xtag.models.onnx_encoder import EncoderConfig
from xtag.training.cascadexml.config import CascadeXMLExportConfig
from xtag.training.cascadexml.net import CascadeXMLNet, LogitsGraph
from xtag.training.cascadexml.result import SHAPE_FILE
from xtag.training.config import TrainConfig
from xtag.training.deep.checkpoint import load_heads
from xtag.training.exporting import copy_run_model, step
from xtag.training.onnx.graph import write_graph
from xtag.training.onnx.parity import embedding_diff, top_agreement

EVAL_BATCH = 64


def load_run_net(run_encoder: Path, attn_implementation: str | None = "eager") -> tuple[CascadeXMLNet, EncoderConfig]:
    """The trained torch net of a run's model/encoder (Hugging Face transformer + heads.safetensors)."""
    from xtag.training.deep.encoder import TextEncoder

    config = EncoderConfig.model_validate_json((run_encoder / "xtag_encoder.json").read_text())
    shape = json.loads((run_encoder / SHAPE_FILE).read_text())
    transformer = TextEncoder.from_pretrained(run_encoder, "cls", attn_implementation).transformer
    net = CascadeXMLNet(transformer, **shape)
    load_heads(net, run_encoder)
    return net.eval(), config


def torch_outputs(module, tokenizer, texts: list[str]) -> CascadeOutputs:
    """What the graph should return for `texts`: the torch module in eval mode, on CPU, in float32."""
    import torch
    from xtag.training.deep.encoder import run_batched

    return CascadeOutputs(list(run_batched(module, tokenizer, texts, EVAL_BATCH, torch.device("cpu"))))


def export_cascadexml(run_model: Path, tmp: Path, config: CascadeXMLExportConfig) -> dict:
    """Write tmp/encoder/{model.onnx, tokenizer.json, config.json}; return the parity report."""
    run_encoder = run_model / "encoder"
    with step("loading the trained CascadeXML net"):
        net, enc_config = load_run_net(run_encoder)
    graph = LogitsGraph(net) if config.outputs == "logits" else net
    names = output_names(len(net.sizes))
    out = tmp / "encoder"
    tokenizer, texts = write_graph(graph, run_encoder, out, enc_config, config, names)

    model = CascadeXMLModel.load(tmp)  # the run's numpy heads, told what this graph returns
    model.config = model.config.model_copy(update={"outputs": config.outputs})
    model.save(tmp)

    with step(f"parity check, torch vs ONNX on {len(texts)} texts"):
        reference = torch_outputs(graph, tokenizer, texts)
        onnx = CascadeXMLEncoder.load(out).transform(texts)
        parity = {n: embedding_diff(a, b) for n, a, b in zip(names, onnx.levels, reference.levels)}
    worst = max(p["max_abs_diff"] for p in parity.values())
    report = {
        "opset": config.opset,
        "outputs": config.outputs,
        "parity_texts": len(texts),
        "parity_tolerance": config.parity_tolerance,
        "parity": parity,
        "top5_agreement_vs_torch": top_agreement(model.predict(onnx, k=5).labels, model.predict(reference, k=5).labels),
    }
    if not worst <= config.parity_tolerance:
        raise XtagError(
            f"ONNX graph differs from torch by {worst:.3g} on {len(texts)} texts "
            f"(tolerance {config.parity_tolerance}); refusing to export"
        )
    return report


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    """No TF-IDF in the bundle: the graph reads raw text."""
    copy_run_model(run_model, tmp, leave_out=("encoder", "features"))
    return export_cascadexml(run_model, tmp, config.cascadexml.export)
