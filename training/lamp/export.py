"""LaMP run → bundle: the first-stage bundle as it is (first_stage/), and the re-ranker as one ONNX graph
(frozen encoder + LaMP layers) in lamp/, parity-checked against torch on the run's sample texts with the
first stage's real candidates: the logits and the attention outputs that explanations read. With int8
weights (`--quantize int8`, lamp.export.precision) the quantized graph must also rank as the fp32 graph
does: its top 5 on the parity texts agree with fp32's on at least lamp.export.min_top5_agreement, else
nothing is published. The bundle's labels are the first stage's, and so are their texts when it has them (a first
stage with the label-text stage): LaMP scores its label ids."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from xtag.models.bundle.loader import load_bundle
from xtag.models.errors import XtagError
from xtag.models.files.atomic import write_text_atomic
from xtag.models.label_texts import LABEL_TEXTS_FILE
from xtag.models.lamp.model import ATTENTION, HEAD_FILE, INPUTS, OUTPUTS, LampHeadConfig, LampReranker
from xtag.training.config import TrainConfig
from xtag.training.export.steps import copy_run_model, step
from xtag.training.lamp.result import LAMP_NET
from xtag.training.lamp.serving_c import serving_candidates
from xtag.training.onnx.graph import write_graph
from xtag.training.onnx.optimize import set_precision
from xtag.training.onnx.parity import parity_gate


def example_inputs(sequence: int) -> dict:
    """Candidate inputs for the exporter's example batch of 2: a width unlike the token count."""
    width = sequence + 3
    candidates = np.tile(np.arange(width, dtype=np.int64), (2, 1))
    scores = np.linspace(1, 0, width, dtype=np.float32)[None].repeat(2, 0)
    mask = np.ones((2, width, width), dtype=np.float32)
    axes = {"candidates": ("batch", "candidates"), "scores": ("batch", "candidates")}
    axes["label_mask"] = ("batch", "candidates", "candidates")
    return {name: (array, axes[name]) for name, array in zip(INPUTS, (candidates, scores, mask))}


def torch_outputs(net, reranker: LampReranker, texts: list[str], labels: np.ndarray, scores: np.ndarray) -> dict:
    """What the graph should return (OUTPUTS): the torch net in eval mode, on CPU, float32, one text at a time;
    the token attention zero-padded to the batch's longest text, as the graph's is (a padded token's weight
    is exp(-1e4) = 0 in float32)."""
    import torch

    width = reranker.onnx.tokenizer(texts)[0].shape[1]
    out: dict[str, list] = {name: [] for name in OUTPUTS}
    with torch.inference_mode():
        for i, text in enumerate(texts):
            ids, mask = reranker.onnx.tokenizer([text])
            feeds = reranker.inputs(labels[i : i + 1], scores[i : i + 1])
            args = [torch.from_numpy(a) for a in (ids, mask, *(feeds[n] for n in INPUTS))]
            logits, to_tokens, to_labels = (t.numpy() for t in net.eval()(*args))
            to_tokens = np.pad(to_tokens, ((0, 0), (0, 0), (0, width - to_tokens.shape[2])))
            for name, array in zip(OUTPUTS, (logits, to_tokens, to_labels)):
                out[name].append(array)
    return {name: np.concatenate(arrays) for name, arrays in out.items()}


def onnx_outputs(reranker: LampReranker, texts: list[str], labels: np.ndarray, scores: np.ndarray) -> dict:
    """The graph's OUTPUTS for all `texts` in one batch (the parity texts are few)."""
    ids, mask = reranker.onnx.tokenizer(texts)
    arrays = reranker.onnx.forward(list(OUTPUTS), ids, mask, reranker.inputs(labels, scores))
    return dict(zip(OUTPUTS, arrays))


def real_candidates(outputs: dict, valid: np.ndarray) -> dict:
    """The outputs with padded candidates' entries zeroed: their logits and attention rows are ignored."""
    kept = {"logits": np.where(valid, outputs["logits"], 0.0)}
    kept["token_attention"] = np.where(valid[:, :, None], outputs["token_attention"], 0.0)
    kept["label_attention"] = np.where(valid[:, :, None] & valid[:, None, :], outputs["label_attention"], 0.0)
    return kept


def serve_with_candidates(folder: Path, candidates: int | None) -> int:
    """The C the re-ranker was trained on (its lamp.json's); with `candidates` (lamp.export.candidates) lamp.json
    then says C = `candidates`: the graph takes any C, but it learned on the trained one, so more than that is
    refused; the parity check then runs at the C the bundle serves."""
    head = LampHeadConfig.model_validate_json((folder / HEAD_FILE).read_text())
    if candidates is None:
        return head.candidates
    if candidates > head.candidates:
        raise XtagError(
            f"--candidates {candidates}: the re-ranker was trained on {head.candidates} candidates; give at most that"
        )
    write_text_atomic(folder / HEAD_FILE, head.model_copy(update={"candidates": candidates}).model_dump_json(indent=2))
    return head.candidates


def export(run_model: Path, tmp: Path, config: TrainConfig) -> dict:
    lc = config.lamp
    if lc.first_stage is None or not (Path(lc.first_stage) / "manifest.json").is_file():
        raise XtagError(f"lamp: the first-stage bundle {lc.first_stage} is gone; export needs it (it is copied in)")
    copy_run_model(run_model, tmp, leave_out=("encoder", "features", "labels.json"))
    shutil.copytree(lc.first_stage, tmp / "first_stage")
    shutil.copyfile(tmp / "first_stage" / "labels.json", tmp / "labels.json")
    if (tmp / "first_stage" / LABEL_TEXTS_FILE).is_file():  # its labels' texts too (a first stage with --labels)
        shutil.copyfile(tmp / "first_stage" / LABEL_TEXTS_FILE, tmp / LABEL_TEXTS_FILE)
    first = load_bundle(tmp / "first_stage")
    run_encoder = run_model / "encoder"
    with step("loading the trained LaMP net"):
        net, enc_config = LAMP_NET.load_run_net(run_encoder)
    tokenizer, texts = write_graph(net, run_encoder, tmp / "lamp", enc_config, lc.export, list(OUTPUTS), example_inputs)
    with step("choosing C on the run's held-out texts"):
        served_c, why_c = serving_candidates(config, first, tmp / "lamp")
    trained_c = serve_with_candidates(tmp / "lamp", served_c)
    reranker = LampReranker.load(tmp / "lamp")
    C = reranker.config.candidates
    cand = first.predictor.predict(texts, k=C, calibrated=False)

    def top5(outputs: dict[str, np.ndarray]) -> np.ndarray:
        logits = np.where(cand.labels >= 0, outputs["logits"], -np.inf)
        order = np.argsort(-logits, axis=1, kind="stable")[:, :5]
        return np.take_along_axis(cand.labels, order, 1)

    valid = cand.labels >= 0

    def graph_outputs() -> dict[str, np.ndarray]:  # of the graph in lamp/ as it stands (fp32, then int8)
        return real_candidates(onnx_outputs(LampReranker.load(tmp / "lamp"), texts, cand.labels, cand.scores), valid)

    with step(f"parity check, torch vs ONNX on {len(texts)} texts (logits and {', '.join(ATTENTION)})"):
        reference = real_candidates(torch_outputs(net, reranker, texts, cand.labels, cand.scores), valid)
        onnx = graph_outputs()
    report = {
        "candidates": C,
        "trained_candidates": trained_c,
        **parity_gate(lc.export, len(texts), onnx, reference, top5),
    }
    precision, floor = lc.export.precision, lc.export.min_top5_agreement
    if precision == "auto":  # int8 when it passes the gate, else fp32 (an explicit int8 refuses instead)
        report["int8"], why_precision = gated_int8(tmp / "lamp", graph_outputs, onnx, reference, top5, floor)
    elif precision != "fp32":  # gated on the ranking it gives: LaMP's outputs are the ranking
        report[precision] = set_precision(tmp / "lamp", precision, graph_outputs, onnx, reference, top5, floor)
        why_precision = f"{precision} as asked: top-5 agreement {report[precision]['top5_agreement_vs_fp32']:.3f}"
    else:
        why_precision = "fp32 as asked"
    report["chosen"] = f"{why_precision}; {why_c}"  # `xtag export` prints it: what the bundle serves, and why
    return report


def gated_int8(folder: Path, outputs, fp32: dict, torch: dict, top5, floor: float) -> tuple[dict, str]:
    """lamp.export.precision=auto: int8 weights if their top 5 agree with fp32's on at least `floor` of the parity
    texts, else the fp32 graph kept as it was; (the int8 report, the one-line reason)."""
    kept = {name: (folder / name).read_bytes() for name in ("model.onnx", "config.json")}
    try:
        report = set_precision(folder, "int8", outputs, fp32, torch, top5, floor)
    except XtagError as exc:
        for name, data in kept.items():
            (folder / name).write_bytes(data)
        (folder / "model.fp32.onnx").unlink(missing_ok=True)
        why = str(exc).removesuffix("; refusing to export")
        return {"refused": why}, f"fp32: int8 did not pass the gate ({why})"
    agreement = report["top5_agreement_vs_fp32"]
    return report, f"int8: top-5 agreement {agreement:.3f} >= {floor} gate"
