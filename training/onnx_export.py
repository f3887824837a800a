"""Torch encoder → encoder/model.onnx for serving without torch, parity-checked against torch on real texts.

Exporter: torch.onnx's dynamo exporter (the TorchScript one mis-traces the attention masks of
transformers ≥ 5: we measured 0.1-0.35 max abs difference), default opset 18, dynamic `batch` and
`sequence` axes on input_ids / attention_mask / last_hidden_state. Attention is exported in its
eager form, which onnxruntime runs faster on CPU than the SDPA export. Pooling stays outside the
graph (models/onnx_encoder.pool_numpy), as the bundle's encoder/config.json says.
"""

from __future__ import annotations

import io
import json
import shutil
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import torch
from torch import nn

from models.encoder import encode_texts, load_trained
from models.errors import XtagError
from models.onnx_encoder import OnnxEncoder, TextTokenizer
from training.config import XRExportConfig


class _HiddenStates(nn.Module):
    """The graph ONNX gets: token ids and mask in, last hidden states out."""

    def __init__(self, transformer: nn.Module):
        super().__init__()
        self.transformer = transformer

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def embedding_diff(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Max abs difference and mean cosine similarity of two embedding matrices."""
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return {"max_abs_diff": float(np.abs(a - b).max()), "mean_cosine": float(cos.mean())}


def export_graph(module: nn.Module, ids: np.ndarray, mask: np.ndarray, path: Path, opset: int,
                 output_names: list[str]) -> None:
    """(input_ids, attention_mask) → `output_names`, with dynamic `batch` and `sequence` axes on the inputs."""
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with warnings.catch_warnings(), redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.from_numpy(ids), torch.from_numpy(mask)),
                          str(path), dynamo=True, opset_version=opset, external_data=False,
                          input_names=["input_ids", "attention_mask"], output_names=output_names,
                          dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}), verbose=False)


def _onnx_export(transformer: nn.Module, ids: np.ndarray, mask: np.ndarray, path: Path, opset: int) -> None:
    export_graph(_HiddenStates(transformer), ids, mask, path, opset, ["last_hidden_state"])


def export_encoder(run_encoder: Path, out: Path, config: XRExportConfig) -> tuple[dict, np.ndarray, np.ndarray]:
    """Write out/{model.onnx, tokenizer.json, config.json}; fail when ONNX and torch disagree beyond tolerance.

    Returns the report and the ONNX and torch embeddings of the parity texts (for `quantize`).
    """
    encoder, enc_config = load_trained(run_encoder, attn_implementation="eager")
    encoder.eval()
    tokenizer = TextTokenizer.load(run_encoder / "tokenizer.json", enc_config.max_length)
    texts = json.loads((run_encoder / "sample_texts.json").read_text())[:config.parity_texts]
    if len(texts) < 2:
        raise XtagError(f"{run_encoder}: the parity check needs at least 2 sample texts")
    out.mkdir(parents=True, exist_ok=True)
    # Example inputs of batch 2 and > 2 tokens, so neither axis is specialised to a constant.
    ids, mask = tokenizer([texts[0] + " " + texts[1], texts[1]])
    _onnx_export(encoder.transformer, ids, mask, out / "model.onnx", config.opset)
    shutil.copyfile(run_encoder / "tokenizer.json", out / "tokenizer.json")
    enc_config = enc_config.model_copy(update={"opset": config.opset})
    (out / "config.json").write_text(enc_config.model_dump_json(indent=2))

    reference = encode_texts(encoder, tokenizer, texts, 16, torch.device("cpu"))
    fp32 = OnnxEncoder.load(out).encode(texts)
    parity = embedding_diff(fp32, reference)
    report = {"opset": config.opset, "parity_texts": len(texts), "parity_tolerance": config.parity_tolerance,
              "parity": parity}
    if not parity["max_abs_diff"] <= config.parity_tolerance:
        raise XtagError(f"ONNX encoder differs from torch by {parity['max_abs_diff']:.3g} on {len(texts)} "
                        f"texts (tolerance {config.parity_tolerance}); refusing to export")
    return report, fp32, reference


def quantize(folder: Path, texts: list[str], fp32: np.ndarray, reference: np.ndarray) -> dict:
    """Replace model.onnx by dynamic int8 weights (onnxruntime.quantization) and measure what it costs."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = folder / "model.fp32.onnx"
    (folder / "model.onnx").rename(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(source, folder / "model.onnx", weight_type=QuantType.QInt8)
    source.unlink()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "quantized": True}, indent=2))
    int8 = OnnxEncoder.load(folder).encode(texts)
    return {"vs_fp32": embedding_diff(int8, fp32), "vs_torch": embedding_diff(int8, reference)}
