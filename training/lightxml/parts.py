"""LightXML's training pieces: label clusters, validation split, training candidates (eq. 2), SWA, the result.

The loop that uses them is training/lightxml.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from models.label_tree import ClusterChain
from models.lightxml.model import LightXMLHeadConfig, LightXMLModel
from models.onnx_encoder import EncoderConfig, TextTokenizer
from training.lightxml.config import LightXMLConfig
from training.lightxml.net import LightXMLNet
from training.tree import TreeConfig, build_tree, pifa_embeddings


def label_clusters(X: sp.csr_matrix, Y: sp.csr_matrix, lc: LightXMLConfig) -> ClusterChain:
    """Two-level chain root → clusters → labels (the paper's two-layer PLT).

    Up to `flat_max_labels` labels: one label per cluster (the paper's choice for small label sets).
    Above: PIFA label vectors (normalised sums of their documents' TF-IDF rows) split recursively by
    balanced 2-means until clusters hold at most C labels (so between C/2 and C, as in AttentionXML);
    only the leaf clusters are kept.
    """
    L = Y.shape[1]
    if L <= lc.flat_max_labels or lc.cluster_size == 1:
        return ClusterChain(ptrs=[np.array([0, L]), np.arange(L + 1)], leaf_labels=np.arange(L))
    tree = build_tree(pifa_embeddings(X, Y), TreeConfig(branching=2, max_leaf_size=lc.cluster_size, seed=lc.seed))
    leaves = tree.ptrs[-1]
    return ClusterChain(ptrs=[np.array([0, len(leaves) - 1]), leaves], leaf_labels=tree.leaf_labels)


def validation_split(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, held-out validation rows) for model selection; the test set is never seen."""
    perm = np.random.default_rng([seed, 7]).permutation(n)
    n_val = int(round(fraction * n)) if n > 1 else 0
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def training_candidates(top: np.ndarray, true_clusters: list[np.ndarray], members: np.ndarray,
                        positives: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 2 in training: labels of each row's top clusters plus its true clusters (duplicates removed).

    Returns (labels, valid mask, targets), each rows × max candidates; padded entries hold label 0
    with mask 0. `members` is the cluster × size table of label ids (-1 padded).
    """
    rows = []
    for top_row, true_row in zip(top, true_clusters):
        clusters = np.unique(np.concatenate([top_row, true_row]))
        labels = members[clusters].ravel()
        rows.append(labels[labels >= 0])
    width = max(max((len(r) for r in rows), default=1), 1)
    labels = np.zeros((len(rows), width), dtype=np.int64)
    valid = np.zeros((len(rows), width), dtype=np.float32)
    y = np.zeros((len(rows), width), dtype=np.float32)
    for i, (r, pos) in enumerate(zip(rows, positives)):
        labels[i, :len(r)], valid[i, :len(r)] = r, 1.0
        y[i, :len(r)] = np.isin(r, pos)
    return labels, valid, y


class SWA:
    """Stochastic weight averaging: the running mean of the parameters at each `update`."""

    def __init__(self, net: nn.Module):
        self.net, self.count = net, 0
        self.mean: dict[str, torch.Tensor] = {}

    def update(self) -> None:
        self.count += 1
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                if name not in self.mean:
                    self.mean[name] = p.detach().float().clone()
                else:
                    self.mean[name].add_(p.detach().float() - self.mean[name], alpha=1.0 / self.count)

    def swap(self) -> None:
        """Exchange the live parameters and the averages (twice = back to where it was)."""
        if not self.count:
            return
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                live = p.detach().clone()
                p.copy_(self.mean[name])
                self.mean[name] = live.float()

    def state(self) -> dict[str, torch.Tensor]:
        return {**{f"mean.{k}": v for k, v in self.mean.items()}, "count": torch.tensor([self.count])}

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        self.count = int(tensors["count"][0]) if "count" in tensors else 0
        self.mean = {k[5:]: v for k, v in tensors.items() if k.startswith("mean.")}


HEADS_FILE = "heads.safetensors"


def save_heads(net: LightXMLNet, folder: Path) -> None:
    """Generator, bottleneck and label embeddings (the transformer is saved as a Hugging Face directory)."""
    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items() if not k.startswith("transformer.")},
              str(folder / HEADS_FILE))


def load_heads(net: LightXMLNet, folder: Path) -> None:
    missing, unexpected = net.load_state_dict(load_file(str(folder / HEADS_FILE)), strict=False)
    if unexpected or any(not k.startswith("transformer.") for k in missing):
        raise ValueError(f"{folder / HEADS_FILE}: missing {missing}, unexpected {unexpected}")


@dataclass
class LightXMLResult:
    """What a finished run saves: clusters + label embeddings (numpy, as served) and the torch net for export."""

    net: LightXMLNet
    chain: ClusterChain
    tokenizer: TextTokenizer
    encoder_config: EncoderConfig
    head_config: LightXMLHeadConfig
    sample_texts: list[str]
    stats: dict

    @property
    def model(self) -> LightXMLModel:
        E = self.net.label_embeddings.weight.detach().cpu().numpy()
        return LightXMLModel(self.chain, E, self.head_config)

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        enc = folder / "encoder"
        enc.mkdir(parents=True, exist_ok=True)
        self.net.transformer.save_pretrained(str(enc), safe_serialization=True)
        self.tokenizer.tokenizer.save(str(enc / "tokenizer.json"))
        (enc / "xtag_encoder.json").write_text(self.encoder_config.model_dump_json(indent=2))
        save_heads(self.net, enc)
        (enc / "lightxml_net.json").write_text(json.dumps(net_shape(self.net)))
        (enc / "sample_texts.json").write_text(json.dumps(self.sample_texts, ensure_ascii=False))

    def summary(self) -> dict:
        return {"features": self.net.width, "training": self.stats}


def net_shape(net: LightXMLNet) -> dict:
    return {"n_clusters": net.generator.out_features, "n_labels": net.label_embeddings.num_embeddings,
            "last_layers": net.last_layers, "dropout": net.dropout.p, "hidden_dim": net.bottleneck.out_features}
