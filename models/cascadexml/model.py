"""CascadeXML at inference, torch-free: one ONNX graph gives every resolution's [CLS] feature (or its logits);
the cascade runs in numpy.

Resolution 0 scores all its nodes; resolution r + 1 scores only the children of resolution r's top-k_r
nodes; a label's score is σ(label logit) × σ(logit of its immediate parent), as the reference does
(not the product along the whole path, which XR-Linear's beam search uses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import expit
from xtag.models.cascadexml.cascade import child_tables, expand, top_nodes
from xtag.models.errors import XtagError
from xtag.models.features.onnx_encoder import GraphOutputsEncoder
from xtag.models.files import index_bounds
from xtag.models.files.atomic import write_atomic, write_text_atomic
from xtag.models.inference.beam_search import top_k
from xtag.models.inference.model import CostHint, Model
from xtag.models.inference.types import Predictions
from xtag.models.label_tree import ClusterChain

HEADS_FILE = "heads.npz"


def output_names(levels: int) -> list[str]:
    """The ONNX graph's outputs: one per resolution, coarse first."""
    return [f"level_{r}" for r in range(levels)]


class CascadeHeadConfig(BaseModel):
    """cascadexml/config.json: the resolutions' sizes, each cluster level's top-k, what the graph returns."""

    model_config = ConfigDict(extra="forbid")

    sizes: list[int] = Field(..., min_length=1, description="nodes per resolution, coarse first; last = labels")
    top_k: list[Annotated[int, Field(ge=1)]] = Field(
        ..., description="top-k of each cluster level (all resolutions but the labels)"
    )
    dim: int = Field(..., ge=1, description="feature size of every resolution (the encoder's hidden size)")
    outputs: Literal["features", "logits"] = "features"

    @property
    def beam_size(self) -> int:
        """The service's default beam: the last cluster level's top-k (the label shortlist's width)."""
        return self.top_k[-1] if self.top_k else self.sizes[0]

    def scaled_top_k(self, beam_size: int | None) -> list[int]:
        """Each level's top-k for a requested beam: the configured ones scaled by beam / default beam, so a
        wider beam (reweighting asks for 2×) widens every level in proportion."""
        if beam_size is None or beam_size == self.beam_size:
            return list(self.top_k)
        return [max(1, math.ceil(k * beam_size / self.beam_size)) for k in self.top_k]


@dataclass
class CascadeOutputs:
    """What the graph returns for a batch: per resolution, features (n × dim) or logits (n × its size)."""

    levels: list[np.ndarray]


class CascadeXMLEncoder(GraphOutputsEncoder):
    """Texts → CascadeOutputs through encoder/model.onnx (session and tokenizer from models/features/onnx_encoder.py)."""

    @classmethod
    def check_outputs(cls, folder: Path, names: list[str]) -> None:
        if not names or names != output_names(len(names)):
            raise XtagError(f"{folder}/model.onnx: outputs {names}, a CascadeXML graph returns level_0, level_1, …")

    @classmethod
    def wrap(cls, arrays: list[np.ndarray]) -> CascadeOutputs:
        return CascadeOutputs(list(arrays))


class CascadeXMLModel(Model):
    """Resolutions (a ClusterChain), each resolution's classifier (embedding E_r, bias b_r) and the cascade."""

    def cost_hint(self) -> CostHint:
        """A transformer encodes every document: the encoder profile of the cost model."""
        return CostHint("encoder")

    def __init__(self, chain: ClusterChain, weights: list[np.ndarray], biases: list[np.ndarray], config):
        sizes = [chain.level_size(t) for t in range(1, chain.depth + 1)]
        if sizes != config.sizes or len(config.top_k) != len(sizes) - 1:
            raise XtagError(f"CascadeXML resolutions {sizes}; config says {config.sizes}, top-k {config.top_k}")
        if [w.shape for w in weights] != [(s, config.dim) for s in sizes] or [len(b) for b in biases] != sizes:
            raise XtagError(f"CascadeXML heads {[w.shape for w in weights]} do not match resolutions {sizes}")
        self.chain, self.config = chain, config
        self.weights = [np.ascontiguousarray(w, dtype=np.float32) for w in weights]
        self.biases = [np.asarray(b, dtype=np.float32) for b in biases]
        self.tables = child_tables(chain)

    @property
    def n_labels(self) -> int:
        return self.chain.n_labels

    def logits(self, outputs: CascadeOutputs, r: int, nodes: np.ndarray | None) -> np.ndarray:
        """Resolution r's logits for `nodes` (n × m node ids, -1 padded; None: the whole level)."""
        out = outputs.levels[r]
        if self.config.outputs == "logits":
            return out if nodes is None else np.take_along_axis(out, np.maximum(nodes, 0), axis=1)
        if nodes is None:
            return out @ self.weights[r].T + self.biases[r]
        safe = np.maximum(nodes, 0)
        return np.einsum("nd,nmd->nm", out, self.weights[r][safe], optimize=True) + self.biases[r][safe]

    def check(self, outputs: CascadeOutputs) -> None:
        widths = [self.config.dim] * len(self.config.sizes) if self.config.outputs == "features" else self.config.sizes
        if [o.shape[1] for o in outputs.levels] != widths:
            raise XtagError(f"graph outputs have widths {[o.shape[1] for o in outputs.levels]}, expected {widths}")

    def predict(self, outputs: CascadeOutputs, k: int = 10, beam_size: int | None = None) -> Predictions:
        self.check(outputs)
        n = outputs.levels[0].shape[0]
        nodes = np.broadcast_to(np.arange(self.config.sizes[0]), (n, self.config.sizes[0]))
        logits = self.logits(outputs, 0, None)
        parent_logit = None
        for r, top in enumerate(self.config.scaled_top_k(beam_size)):
            parents, picked = top_nodes(logits, nodes, top)
            nodes, owner = expand(parents, self.tables[r])
            parent_logit = np.take_along_axis(picked, owner, axis=1)
            logits = self.logits(outputs, r + 1, nodes)
        scores = expit(logits) if parent_logit is None else expit(logits) * expit(parent_logit)
        scores = np.where(nodes >= 0, scores, -np.inf).astype(np.float32)
        labels = np.where(nodes >= 0, self.chain.leaf_labels[np.maximum(nodes, 0)], -1)
        return Predictions(*top_k(scores, labels, k))

    def save(self, folder: Path) -> None:
        """tree/chain.npz and cascadexml/{config.json, heads.npz} (E_r and b_r per resolution), written atomically."""
        (folder / "cascadexml").mkdir(parents=True, exist_ok=True)
        (folder / "tree").mkdir(parents=True, exist_ok=True)
        self.chain.save(folder / "tree" / "chain.npz")
        arrays = {f"weight_{r}": w for r, w in enumerate(self.weights)}
        arrays.update({f"bias_{r}": b for r, b in enumerate(self.biases)})
        write_atomic(folder / "cascadexml" / HEADS_FILE, lambda fh: np.savez(fh, **arrays))
        write_text_atomic(folder / "cascadexml" / "config.json", self.config.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> CascadeXMLModel:
        """Resolutions and heads of a run or bundle folder (tree/, cascadexml/)."""
        return cls.load_heads(folder / "cascadexml", ClusterChain.load_tree(folder / "tree"))

    @classmethod
    def load_heads(cls, folder: Path, chain: ClusterChain) -> CascadeXMLModel:
        """The cascadexml/ component (head config, per-resolution classifiers) over already loaded resolutions."""
        try:
            config = CascadeHeadConfig.model_validate_json((folder / "config.json").read_text())
            with np.load(folder / HEADS_FILE, allow_pickle=False) as z:
                levels = len(config.sizes)
                weights = [z[f"weight_{r}"] for r in range(levels)]
                biases = [z[f"bias_{r}"] for r in range(levels)]
        except (OSError, ValueError, KeyError) as exc:
            raise XtagError(f"{folder}: cannot read the CascadeXML heads ({exc})") from exc
        for r, top in enumerate(config.top_k):
            index_bounds.beam(str(folder / "config.json"), f"top_k[{r}]", top, chain.n_labels)
        return cls(chain, weights, biases, config)
