"""The ONNX graph export every transformer family uses (parity measures: training/onnx/parity.py).

Exporter: torch.onnx's dynamo exporter (the TorchScript one mis-traces the attention masks of
transformers ≥ 5: we measured 0.1-0.35 max abs difference), default opset 18, dynamic `batch` and
`sequence` axes on input_ids / attention_mask. Attention is exported in its eager form, which
onnxruntime runs faster on CPU than the SDPA export.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
import warnings
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import torch
from torch import nn
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import EncoderConfig, TextTokenizer
from xtag.training.deep.config import TransformerExportConfig
from xtag.training.export.steps import log, step
from xtag.training.onnx.optimize import attention_shape, fuse

# Extra graph inputs after input_ids and attention_mask: name → (example array of batch 2, each axis's name);
# axes of the same name share one dynamic dimension ("batch" and "sequence" are the text inputs').
ExtraInputs = dict[str, tuple[np.ndarray, tuple[str, ...]]]


def export_graph(
    module: nn.Module,
    ids: np.ndarray,
    mask: np.ndarray,
    path: Path,
    opset: int,
    output_names: list[str],
    extra: ExtraInputs | None = None,
) -> None:
    """(input_ids, attention_mask, *extra) → `output_names`, with dynamic `batch` and `sequence` axes on the
    inputs (and the extra inputs' named axes)."""
    extra = extra or {}
    names = {"batch", "sequence"} | {axis for _, axes in extra.values() for axis in axes}
    dims = {name: torch.export.Dim(name) for name in sorted(names)}
    batch, seq = dims["batch"], dims["sequence"]
    arrays = [torch.from_numpy(a) for a, _ in extra.values()]
    shapes = [{i: dims[axis] for i, axis in enumerate(axes)} for _, axes in extra.values()]
    # The exporter's op registry logs "torchvision is not installed. Skipping torchvision::…" once per vision
    # op: irrelevant to a text encoder, so the exporter's loggers are quietened (and restored) around it.
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module.eval(),
                (torch.from_numpy(ids), torch.from_numpy(mask), *arrays),
                str(path),
                dynamo=True,
                opset_version=opset,
                external_data=False,
                input_names=["input_ids", "attention_mask", *extra],
                output_names=output_names,
                dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}, *shapes),
                verbose=False,
            )
    finally:
        exporter_log.setLevel(level)


def write_graph(
    module: nn.Module,
    run_encoder: Path,
    out: Path,
    enc_config: EncoderConfig,
    config: TransformerExportConfig,
    output_names: list[str],
    extra: Callable[[int], ExtraInputs] | None = None,
) -> tuple[TextTokenizer, list[str]]:
    """out/{model.onnx, tokenizer.json, config.json} for a run's torch module, fused when `config.optimize`
    says so; returns the tokenizer and the run's sample texts the caller checks parity on. `extra(sequence)`
    gives the example extra inputs for the example batch, told its token count (so that no extra axis is
    given the same size, which the exporter would take for the same dimension)."""
    tokenizer = TextTokenizer.load(run_encoder / "tokenizer.json", enc_config.max_length)
    texts = json.loads((run_encoder / "sample_texts.json").read_text())[: config.parity_texts]
    if len(texts) < 2:
        raise XtagError(f"{run_encoder}: the parity check needs at least 2 sample texts")
    out.mkdir(parents=True, exist_ok=True)
    # Example inputs of batch 2 and > 2 tokens, so neither axis is specialised to a constant.
    ids, mask = tokenizer([texts[0] + " " + texts[1], texts[1]])
    with step(f"ONNX export (opset {config.opset})"):
        example = {} if extra is None else {"extra": extra(ids.shape[1])}
        export_graph(module, ids, mask, out / "model.onnx", config.opset, output_names, **example)
    update = {"opset": config.opset}
    if config.optimize:
        with step("onnxruntime transformer fusions"):
            fused = fuse(out / "model.onnx", *attention_shape(module), for_gpu=config.precision == "fp16")
        update["optimized"] = True
        log.info("fused operators: %s", ", ".join(f"{op} × {n}" for op, n in fused.items()) or "none")
    shutil.copyfile(run_encoder / "tokenizer.json", out / "tokenizer.json")
    (out / "config.json").write_text(enc_config.model_copy(update=update).model_dump_json(indent=2))
    return tokenizer, texts
