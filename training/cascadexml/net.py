"""CascadeXML's torch modules: one transformer pass, each resolution's feature from its own layer's [CLS] vector.

Resolution 0 reads the concatenated [CLS] vectors of its layers through Dropout + Linear back to the
hidden size; every resolution then has its own dropout, classifier embedding E_r (nodes × hidden) and
bias b_r. `forward` is the exported graph (eval mode: dropout off): every resolution's feature, or
with `logits=True` its logits for the whole level. Training scores shortlisted nodes with `node_logits`.
"""

from __future__ import annotations

import torch
from torch import nn
from xtag.models.errors import XtagError


class CascadeXMLNet(nn.Module):
    def __init__(
        self,
        transformer: nn.Module,
        sizes: list[int],
        layers: list[list[int]],
        dropouts: list[float],
        feature_dropout: float,
    ):
        super().__init__()
        depth, hidden = int(transformer.config.num_hidden_layers), int(transformer.config.hidden_size)
        if len(layers) != len(sizes) or len(dropouts) != len(sizes):
            raise XtagError(f"{len(sizes)} resolutions, but {len(layers)} layer groups and {len(dropouts)} dropouts")
        if any(not 1 <= layer <= depth for group in layers for layer in group):
            raise XtagError(f"layers {layers}: the encoder has layers 1..{depth}")
        self.transformer, self.layers, self.sizes = transformer, [list(g) for g in layers], list(sizes)
        pooler = getattr(transformer, "pooler", None)  # BERT's pooler head is unused: DDP refuses gradient-less
        if isinstance(pooler, nn.Module):  # parameters
            pooler.requires_grad_(False)
        self.project = nn.Sequential(nn.Dropout(feature_dropout), nn.Linear(len(layers[0]) * hidden, hidden))
        self.dropouts = nn.ModuleList(nn.Dropout(p) for p in dropouts)
        self.embeddings = nn.ModuleList(nn.Embedding(s, hidden) for s in sizes)
        self.biases = nn.ModuleList(nn.Embedding(s, 1) for s in sizes)
        for e, b in zip(self.embeddings, self.biases):
            nn.init.xavier_uniform_(e.weight)
            nn.init.zeros_(b.weight)

    @property
    def hidden(self) -> int:
        return self.project[1].out_features

    def heads(self) -> list[nn.Module]:
        """Everything but the transformer: trained at the heads' learning rate."""
        return [self.project, self.embeddings, self.biases]

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
        """Each resolution's feature (after its dropout), coarse first, from one transformer pass."""
        states = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True
        ).hidden_states  # states[0] is the embedding layer, states[l] the output of layer l
        first = self.project(torch.cat([states[layer][:, 0] for layer in self.layers[0]], dim=-1))
        feats = [first] + [states[group[0]][:, 0] for group in self.layers[1:]]
        return [drop(f) for drop, f in zip(self.dropouts, feats)]

    def level_logits(self, r: int, feature: torch.Tensor) -> torch.Tensor:
        """Resolution r's logits for all its nodes."""
        return feature @ self.embeddings[r].weight.T + self.biases[r].weight[:, 0]

    def node_logits(self, r: int, feature: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """Resolution r's logits E_r[nodes] · feature + b_r[nodes], per row (nodes padded with any valid id)."""
        w = self.embeddings[r](nodes)
        return torch.einsum("bmh,bh->bm", w, feature.to(w.dtype)) + self.biases[r](nodes)[..., 0]

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits: bool = False, shortlist=None
    ) -> tuple:
        """The graph: each resolution's feature (or, `logits`, its whole-level logits). In training,
        `shortlist(r, previous logits)` returns resolution r's candidates (nodes, valid, targets) and forward
        returns, per resolution, (logits, candidates), resolution 0 scoring all its nodes (candidates None)."""
        feats = self.features(input_ids, attention_mask)
        if shortlist is None:
            return tuple(self.level_logits(r, f) for r, f in enumerate(feats)) if logits else tuple(feats)
        z = self.level_logits(0, feats[0])
        out = [(z, None)]
        for r in range(1, len(feats)):
            cand = shortlist(r, z)
            z = self.node_logits(r, feats[r], cand[0])
            out.append((z, cand))
        return tuple(out)


class LogitsGraph(nn.Module):
    """The net with every resolution's whole-level logits as outputs (export.outputs = "logits")."""

    def __init__(self, net: CascadeXMLNet):
        super().__init__()
        self.net = net

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple:
        return self.net(input_ids, attention_mask, logits=True)
