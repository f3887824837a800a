"""LightXML's torch modules: text representation (last-N [CLS] vectors), generator, bottleneck, label embeddings.

`forward` is exactly the graph the bundle ships (eval mode: dropout off): token ids → generator
cluster logits (eq. 1's G(e) before the sigmoid) and the bottleneck σ(W_h e + b_h) of eq. 4.
`label_logits` is the discriminator's M·bottleneck for given candidates; training calls both.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from xtag.models.errors import XtagError


class LightXMLNet(nn.Module):
    def __init__(
        self, transformer: nn.Module, n_clusters: int, n_labels: int, last_layers: int, dropout: float, hidden_dim: int
    ):
        super().__init__()
        layers = int(transformer.config.num_hidden_layers)
        if last_layers > layers:
            raise XtagError(f"last_layers={last_layers}, but the encoder has only {layers} layers")
        self.transformer, self.last_layers = transformer, last_layers
        pooler = getattr(transformer, "pooler", None)  # BERT's pooler head is unused: DDP refuses gradient-less
        if isinstance(pooler, nn.Module):  # parameters
            pooler.requires_grad_(False)
        width = last_layers * int(transformer.config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.generator = nn.Linear(width, n_clusters)
        self.bottleneck = nn.Linear(width, hidden_dim)
        self.label_embeddings = nn.Embedding(n_labels, hidden_dim)
        nn.init.xavier_uniform_(self.label_embeddings.weight)  # "initialised randomly" (paper, eq. 3)

    @property
    def width(self) -> int:
        return self.generator.in_features

    def represent(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """e = [e_1, …, e_N]: the [CLS] state of each of the last N layers, concatenated, then dropout."""
        states = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True
        ).hidden_states
        e = torch.cat([states[-i][:, 0] for i in range(1, self.last_layers + 1)], dim=-1)
        return self.dropout(e)

    def heads(self, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.generator(e), torch.sigmoid(self.bottleneck(e))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, pick: Callable | None = None) -> tuple:
        """Without `pick`: (cluster logits, bottleneck), the exported graph. In training, `pick(cluster logits)`
        returns the step's candidates (labels, valid, targets) or None (generator-only phase), and
        forward returns (cluster logits, discriminator logits or None, candidates)."""
        g, h = self.heads(self.represent(input_ids, attention_mask))
        if pick is None:
            return g, h
        cand = pick(g)
        return g, (self.label_logits(h, cand[0]) if cand is not None else None), cand

    def label_logits(self, bottleneck: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Eq. 4 before its outer sigmoid: E[labels] · bottleneck, per row (labels padded with any valid id)."""
        return torch.einsum(
            "bmh,bh->bm", self.label_embeddings(labels), bottleneck.to(self.label_embeddings.weight.dtype)
        )
