"""LightXML at inference, torch-free: one ONNX graph gives cluster scores and the bottleneck vector;
candidate expansion and discriminator scoring run in numpy (LightXML paper, "Prediction").

score(label) = σ(generator score of its cluster) × σ(E_label · σ(W_h e + b_h)), over the labels of the
top-b clusters only; with one label per cluster and `discriminator` off, σ(generator score) alone.
Training's validation uses this same code on the torch model's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import expit
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import GraphOutputsEncoder
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_text_atomic
from xtag.models.inference.beam_search import top_k
from xtag.models.inference.model import CostHint, Model
from xtag.models.inference.types import Predictions
from xtag.models.label_tree import ClusterChain
from xtag.models.lightxml.label_index import LabelIndex

OUTPUTS = ("cluster_scores", "bottleneck")  # the ONNX graph's outputs, in this order


class LightXMLHeadConfig(BaseModel):
    """lightxml/config.json: how the heads are combined at prediction time."""

    model_config = ConfigDict(extra="forbid")

    beam_size: int = Field(10, ge=1, description="b: top clusters whose labels are scored (the service's beam)")
    n_clusters: int = Field(..., ge=1)
    n_labels: int = Field(..., ge=1)
    dim: int = Field(..., ge=1, description="label-embedding / bottleneck size")
    faiss_min_labels: int = Field(100_000, ge=0, description="label embeddings in a FAISS index from this many labels")
    discriminator: bool = Field(
        True,
        description="score = σ(cluster) × σ(label); False: σ(cluster) alone, for one label per cluster (the "
        "generator then scores every label itself, as the paper does for small label sets)",
    )


@dataclass
class LightXMLOutputs:
    """What the graph returns for a batch: generator logits (n × K) and bottleneck vectors (n × b)."""

    cluster_scores: np.ndarray
    bottleneck: np.ndarray


class LightXMLEncoder(GraphOutputsEncoder):
    """Texts → LightXMLOutputs through encoder/model.onnx (session and tokenizer from models/features/onnx_encoder.py)."""

    @classmethod
    def check_outputs(cls, folder: Path, names: list[str]) -> None:
        if names != list(OUTPUTS):
            raise XtagError(f"{folder}/model.onnx: outputs {names}, a LightXML graph returns {list(OUTPUTS)}")

    @classmethod
    def wrap(cls, arrays: list[np.ndarray]) -> LightXMLOutputs:
        return LightXMLOutputs(*arrays)


def cluster_members(chain: ClusterChain) -> np.ndarray:
    """Cluster × max cluster size table of label ids, -1 padded (g_c⁻¹ of eq. 2)."""
    positions = chain.child_table(2)
    return np.where(positions >= 0, chain.leaf_labels[np.maximum(positions, 0)], -1)


class LightXMLModel(Model):
    """Clusters (a two-level ClusterChain), label embeddings E (L × b), and the prediction rule."""

    def cost_hint(self) -> CostHint:
        """A transformer encodes every document: the encoder profile of the cost model."""
        return CostHint("encoder")

    def __init__(self, chain: ClusterChain, embeddings: np.ndarray, config: LightXMLHeadConfig):
        if chain.depth != 2 or chain.level_size(1) != config.n_clusters or chain.n_labels != config.n_labels:
            raise XtagError(
                f"LightXML clusters: depth {chain.depth}, {chain.level_size(1)} clusters, "
                f"{chain.n_labels} labels; config says {config.n_clusters} clusters, {config.n_labels}"
            )
        if embeddings.shape != (config.n_labels, config.dim):
            raise XtagError(
                f"label embeddings have shape {embeddings.shape}, expected ({config.n_labels}, {config.dim})"
            )
        self.chain, self.config = chain, config
        self.labels = LabelIndex(embeddings.astype(np.float32), use_faiss=config.n_labels >= config.faiss_min_labels)
        self.member_labels = cluster_members(chain)

    @property
    def n_labels(self) -> int:
        return self.config.n_labels

    def candidates(self, cluster_scores: np.ndarray, beam: int) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 2 at prediction: the labels of each row's top-`beam` clusters (-1 padded) and σ(cluster score).

        A label belongs to exactly one cluster, so distinct clusters give distinct labels: the
        candidate lists are duplicate-free by construction (checked in the tests).
        """
        beam = min(beam, self.config.n_clusters)
        rows = np.arange(cluster_scores.shape[0])[:, None]
        part = (
            np.argpartition(-cluster_scores, beam - 1, axis=1)[:, :beam]
            if beam < cluster_scores.shape[1]
            else np.broadcast_to(np.arange(beam), cluster_scores.shape)
        )
        labels = self.member_labels[part].reshape(len(part), -1)
        prob = np.repeat(expit(cluster_scores[rows, part]).astype(np.float32), self.member_labels.shape[1], axis=1)
        return labels, prob

    def predict(self, outputs: LightXMLOutputs, k: int = 10, beam_size: int | None = None) -> Predictions:
        g, h = outputs.cluster_scores, outputs.bottleneck
        if g.shape[1] != self.config.n_clusters or h.shape[1] != self.config.dim:
            raise XtagError(
                f"graph outputs have {g.shape[1]} clusters / dim {h.shape[1]}, the model expects "
                f"{self.config.n_clusters} / {self.config.dim}"
            )
        labels, prob = self.candidates(g, max(beam_size or self.config.beam_size, 1))
        if self.config.discriminator:
            prob = prob * expit(self.labels.scores(h.astype(np.float32), labels))
        scores = np.where(labels >= 0, prob, -np.inf).astype(np.float32)
        return Predictions(*top_k(scores, labels, k))

    def save(self, folder: Path) -> None:
        (folder / "lightxml").mkdir(parents=True, exist_ok=True)
        (folder / "tree").mkdir(parents=True, exist_ok=True)
        self.chain.save(folder / "tree" / "chain.npz")
        self.labels.save(folder / "lightxml")
        write_text_atomic(folder / "lightxml" / "config.json", self.config.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> LightXMLModel:
        """Clusters and heads of a run or bundle folder (tree/, lightxml/)."""
        return cls.load_heads(folder / "lightxml", ClusterChain.load_tree(folder / "tree"))

    @classmethod
    def load_heads(cls, folder: Path, chain: ClusterChain) -> LightXMLModel:
        """The lightxml/ component (head config, label embeddings) over already loaded clusters."""
        try:
            config = LightXMLHeadConfig.model_validate_json((folder / "config.json").read_text())
            embeddings = LabelIndex.load_embeddings(folder)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise XtagError(f"{folder}: cannot read the LightXML heads ({exc})") from exc
        index_bounds.beam(str(folder / "config.json"), "beam_size", config.beam_size, config.n_labels)
        return cls(chain, embeddings, config)
