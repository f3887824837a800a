"""Graph passes between torch.onnx and the bundle: onnxruntime's transformer fusions, then the bundle's precision.

Fusion (onnxruntime.transformers.optimizer) rewrites the exported graph into onnxruntime's fused kernels
(SkipLayerNormalization, BiasGelu, Attention where its pattern matches); it runs before the parity check,
so what ships is what was checked. Precision then rewrites model.onnx once more: dynamic int8 weights
(onnxruntime.quantization) for CPUs, or fp16 (float inputs and outputs kept fp32) for GPUs. Each is
measured against the fp32 graph on the parity texts and the numbers go into the export report; an encoder's
int8 cost is reported, not gated (it is a choice the user makes with `--quantize int8`), while an fp16 graph
whose outputs leave fp32's direction (cosine below FP16_MIN_COSINE) or go non-finite is refused, and so is
a graph whose top 5 agree with fp32's less than the caller's `min_top5` (LaMP's int8 re-ranker).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from torch import nn
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import GraphOutputsEncoder
from xtag.training.export.steps import step
from xtag.training.onnx.parity import Outputs, compare, parity_gate, per_output, top_agreement

FP16_MIN_COSINE = 0.999


def attention_shape(module: nn.Module) -> tuple[int, int]:
    """(heads, hidden size) of the first Hugging Face config inside `module`; (0, 0) lets the optimizer guess."""
    for sub in module.modules():
        config = getattr(sub, "config", None)
        if config is not None and hasattr(config, "num_attention_heads"):
            return int(config.num_attention_heads), int(config.hidden_size)
    return 0, 0


def fuse(path: Path, heads: int, hidden: int, for_gpu: bool = False) -> dict[str, int]:
    """Rewrite `path` with onnxruntime's transformer fusions (python fusions only, opt_level 0, so the file
    stays portable across providers; the session applies its own optimisations at load). Returns the
    count of each fused operator."""
    from onnxruntime.transformers import optimizer

    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)  # per-fusion chatter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = optimizer.optimize_model(
            str(path), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0, use_gpu=for_gpu
        )
    model.save_model_to_file(str(path))
    return {op: n for op, n in model.get_fused_operator_statistics().items() if n}


def _int8(source: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with warnings.catch_warnings(), _root_log_quiet():
        warnings.simplefilter("ignore")
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)


@contextmanager
def _root_log_quiet() -> Iterator[None]:
    """onnxruntime ends quantize_dynamic with a root `logging.warning` ("consider pre-processing"): advice for
    graphs that skipped shape inference, which the export's own fusions and parity check already cover. On a
    root logger without handlers that call also installs logging.basicConfig's handler, after which every
    INFO record of xtag's step loggers printed a second time. A NullHandler keeps basicConfig out, the
    level keeps the advice out; both are restored."""
    root = logging.getLogger()
    handler, level = logging.NullHandler(), root.level
    root.addHandler(handler)
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _fp16(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = OnnxModel(onnx.load(str(source)))
    model.convert_float_to_float16(keep_io_types=True)  # ids in, fp32 hidden states / scores out
    model.save_model_to_file(str(target))


def set_precision(
    folder: Path,
    precision: str,
    outputs: Callable[[], Outputs],
    fp32: Outputs,
    torch: Outputs,
    top5: Callable[[Outputs], np.ndarray] | None = None,
    min_top5: float | None = None,
) -> dict:
    """Rewrite folder/model.onnx to `precision` (int8 or fp16), mark it in config.json, and measure the new
    graph's `outputs()` against the fp32 graph's and torch's, and (`top5`: outputs → top-5 label ids) how far
    its predictions agree with the fp32 graph's. fp16 runs on onnxruntime's CPU provider here: GPU kernels
    round differently, so the figures say which provider checked them. `min_top5` gates any precision on its
    top-5 agreement with the fp32 graph (a re-ranker, whose outputs are the ranking itself: LaMP's int8)."""
    source = folder / "model.fp32.onnx"
    (folder / "model.onnx").rename(source)
    with step(f"{precision} conversion"):
        (_int8 if precision == "int8" else _fp16)(source, folder / "model.onnx")
    source.unlink()
    config = json.loads((folder / "config.json").read_text())
    config.update(precision=precision, quantized=precision == "int8")
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    got = outputs()
    report = {"vs_fp32": compare(got, fp32), "vs_torch": compare(got, torch), "checked_on": "CPUExecutionProvider"}
    if top5 is not None:
        report["top5_agreement_vs_fp32"] = top_agreement(top5(got), top5(fp32))
    if min_top5 is not None:
        agreement = report.get("top5_agreement_vs_fp32", 0.0)
        finite = all(np.isfinite(a).all() for a in (got.values() if isinstance(got, dict) else [got]))
        if not finite or not agreement >= min_top5:
            raise XtagError(
                f"{precision} graph: outputs non-finite or its top 5 agree with the fp32 graph's on only "
                f"{agreement:.3f} of them (< {min_top5}); refusing to export"
            )
    if precision == "fp16":
        arrays = got.values() if isinstance(got, dict) else [got]
        worst = min(m["mean_cosine"] for m in per_output(report["vs_fp32"]))
        if not all(np.isfinite(a).all() for a in arrays) or not worst >= FP16_MIN_COSINE:
            raise XtagError(
                f"fp16 graph: outputs non-finite or off the fp32 graph's (mean cosine {worst:.4g} < "
                f"{FP16_MIN_COSINE}); refusing to export"
            )
    return report


def check_graph(
    folder: Path,
    texts: list[str],
    names: list[str],
    encoder: type[GraphOutputsEncoder],
    model,
    torch_outputs: Callable[[], dict[str, np.ndarray]],
    config,
) -> dict:
    """The end of a family's own-graph export (LightXML, CascadeXML): folder/model.onnx, whose outputs are `names`
    read by `encoder`, against `torch_outputs()` (by name) on `texts` through `parity_gate`, then set to
    `config.precision` and measured again; top-5 agreement by `model.predict`. Returns the report."""

    def graph_outputs() -> dict[str, np.ndarray]:  # of the graph in `folder` as it stands (fp32, then int8 / fp16)
        return dict(zip(names, encoder.load(folder).outputs(texts)))

    def top5(outputs: dict[str, np.ndarray]) -> np.ndarray:
        return model.predict(encoder.wrap([outputs[n] for n in names]), k=5).labels

    with step(f"parity check, torch vs ONNX on {len(texts)} texts"):
        reference = torch_outputs()
        onnx = graph_outputs()
    report = parity_gate(config, len(texts), onnx, reference, top5)
    if config.precision != "fp32":  # its cost: output drift and top-5 agreement with the fp32 graph
        report[config.precision] = set_precision(folder, config.precision, graph_outputs, onnx, reference, top5)
    return report
