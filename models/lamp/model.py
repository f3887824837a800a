"""LaMP at inference, torch-free: the first stage's top-C candidates re-scored by one ONNX graph.

The bundle holds the first-stage bundle (first_stage/, loaded as it is) and the re-ranker (lamp/: the
graph, its tokenizer, lamp.json and, for LaMP_pr, the co-occurring label pairs). The graph reads the
text's tokens, the candidates' label ids, their first-stage scores and the label-to-label mask, and
returns one logit per candidate; the answer is the candidates ordered by σ(logit). Graphs exported since
issue 25's explanations also output the last step's attention weights (ATTENTION); a prediction asks for
the logits alone, and bundles exported before them (logits only) load and predict as they did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import expit
from xtag.models.errors import XtagError
from xtag.models.features.device import Device, RuntimeOptions
from xtag.models.features.onnx_encoder import OnnxEncoder
from xtag.models.files import index_bounds
from xtag.models.inference.beam_search import top_k
from xtag.models.inference.model import CostHint, Model
from xtag.models.inference.types import Predictions
from xtag.models.lamp.masks import label_mask

HEAD_FILE = "lamp.json"
CODES_FILE = "cooccurrence.npy"
INPUTS = ("candidates", "scores", "label_mask")  # the graph's inputs after input_ids and attention_mask
# The graph's outputs: the logits, then the last step's head-averaged attention weights (training/lamp/net.py):
# feature-to-label n × C × tokens and label-to-label n × C × C, read only to explain (models/explain/lamp.py).
ATTENTION = ("token_attention", "label_attention")
OUTPUTS = ("logits", *ATTENTION)


class LampHeadConfig(BaseModel):
    """lamp/lamp.json: the re-ranker's shape and how many first-stage candidates it re-scores."""

    model_config = ConfigDict(extra="forbid")

    candidates: int = Field(..., ge=1, description="C: first-stage candidates re-scored per text")
    graph: Literal["fc", "pr"] = Field(..., description="label-to-label graph: fully connected or co-occurrence")
    steps: int = Field(..., ge=1, description="T: message-passing steps")
    heads: int = Field(..., ge=1)
    dim: int = Field(..., ge=1)
    n_labels: int = Field(..., ge=1, description="the first stage's label count (the label embedding's rows)")


def score_features(scores: np.ndarray) -> np.ndarray:
    """The first-stage scores as the graph reads them: padding (-inf) as 0, float32."""
    return np.where(np.isfinite(scores), scores, 0.0).astype(np.float32)


def check_pair_codes(name: str, codes: np.ndarray, n_labels: int) -> None:
    """LaMP_pr's label graph (models/lamp/masks.py) is found by binary search: its codes i·L + j must be
    integers below L², increasing (each pair once), or pairs that co-occur are silently not found."""
    codes = index_bounds.integers(name, codes)
    index_bounds.in_range(name, codes, 0, n_labels * n_labels, f"pair codes of {n_labels} labels")
    if len(codes) > 1 and bool((np.diff(codes) <= 0).any()):
        raise index_bounds.fail(
            name, f"codes must increase (each pair once), not at position {int(np.argmax(np.diff(codes) <= 0)) + 1}"
        )


class LampReranker:
    """The lamp/ component: the ONNX graph (with its tokenizer) and the label graph it masks attention with."""

    def __init__(self, onnx: OnnxEncoder, config: LampHeadConfig, codes: np.ndarray | None):
        self.onnx, self.config, self.codes = onnx, config, codes

    @classmethod
    def load(
        cls, folder: Path, device: Device | str | None = None, spin: bool = True, options: RuntimeOptions | None = None
    ) -> LampReranker:
        try:
            config = LampHeadConfig.model_validate_json((folder / HEAD_FILE).read_text())
            codes = np.load(folder / CODES_FILE, allow_pickle=False) if config.graph == "pr" else None
        except (OSError, ValueError) as exc:
            raise XtagError(f"{folder}: cannot read the LaMP re-ranker ({exc})") from exc
        index_bounds.beam(str(folder / HEAD_FILE), "candidates", config.candidates, config.n_labels)
        if codes is not None:
            check_pair_codes(str(folder / CODES_FILE), codes, config.n_labels)
        onnx = OnnxEncoder.load(folder, device=device, spin=spin, options=options)
        if [i.name for i in onnx.session.get_inputs()][2:] != list(INPUTS):
            raise XtagError(
                f"{folder}/model.onnx: not a LaMP graph (inputs {[i.name for i in onnx.session.get_inputs()]})"
            )
        return cls(onnx, config, codes)

    @property
    def has_attention(self) -> bool:
        """Whether the graph outputs its attention weights (bundles exported before issue 25's explanations do not)."""
        return set(ATTENTION) <= {o.name for o in self.onnx.session.get_outputs()}

    def inputs(self, labels: np.ndarray, scores: np.ndarray) -> dict[str, np.ndarray]:
        """The graph's candidate inputs for first-stage top lists (label -1 = padding)."""
        valid = (labels >= 0).astype(np.float32)
        candidates = np.maximum(labels, 0).astype(np.int64)
        mask = label_mask(candidates, valid, self.codes, self.config.n_labels)
        return {"candidates": candidates, "scores": score_features(scores) * valid, "label_mask": mask}

    def batches(self, texts: list[str]):
        """(text indices, input_ids, attention_mask) per forward: tokenized once, batched by text length."""
        return self.onnx.tokenizer.batches(texts, self.onnx.batch_size)

    def logits(self, texts: list[str], labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """n × C logits of the candidates (the attention outputs are not fetched)."""
        out = np.empty(labels.shape, dtype=np.float32)
        for idx, ids, mask in self.batches(texts):
            out[idx] = self.onnx.forward(["logits"], ids, mask, self.inputs(labels[idx], scores[idx]))[0]
        return out

    def attention(
        self, texts: list[str], labels: np.ndarray, scores: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text, the last step's weights: (C × its tokens, feature-to-label; C × C, label-to-label)."""
        out: list = [None] * len(texts)
        for idx, ids, mask in self.batches(texts):
            to_tokens, to_labels = self.onnx.forward(list(ATTENTION), ids, mask, self.inputs(labels[idx], scores[idx]))
            for row, i in enumerate(idx):
                out[i] = (to_tokens[row, :, : int(mask[row].sum())], to_labels[row])
        return out


class Texts:
    """The featuriser of a re-ranking bundle: the texts themselves (the first stage featurises its own way)."""

    tfidf = None  # the Featurizer contract (models/inference/predictor.py)
    encodes = False
    dim = None  # texts, not a feature matrix

    def transform(self, texts: list[str]) -> list[str]:
        return list(texts)


class LampModel(Model):
    """First stage + re-ranker. `predict(..., rerank=False)` is the first stage's answer, unchanged."""

    reranks = True  # a second stage: predict takes `rerank` (models/inference/model.py)

    def __init__(self, first, reranker: LampReranker):
        if first.n_labels != reranker.config.n_labels:
            raise XtagError(f"LaMP re-ranker has {reranker.config.n_labels} labels, its first stage {first.n_labels}")
        self.first, self.reranker = first, reranker

    @property
    def config(self):
        """The first stage's model config (its beam size is the bundle's)."""
        return self.first.model.config

    @property
    def n_labels(self) -> int:
        return self.first.n_labels

    def cost_hint(self) -> CostHint:
        """The graph re-scores max(C, k) candidates with attention between them: quadratic in that width."""
        return CostHint("lamp", self.reranker.config.candidates, self.first.cost_hint().level_nodes)

    def candidates(self, texts: list[str], k: int, beam_size: int | None) -> Predictions:
        """The first stage's top-max(C, k), raw scores (the features LaMP was trained on)."""
        width = max(self.reranker.config.candidates, k)
        return self.first.predict(texts, k=min(width, self.n_labels), beam_size=beam_size, calibrated=False)

    def predict(self, texts: list[str], k: int = 10, beam_size: int | None = None, rerank: bool = True) -> Predictions:
        if not rerank:
            return self.first.predict(texts, k=k, beam_size=beam_size)
        cand = self.candidates(texts, k, beam_size)
        probs = expit(self.reranker.logits(texts, cand.labels, cand.scores))
        probs = np.where(cand.labels >= 0, probs, -np.inf).astype(np.float32)
        return Predictions(*top_k(probs, cand.labels, k))
