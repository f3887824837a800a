"""LaMP's layers (paper section 2): label nodes that attend to the text's tokens, then to each other, T times.

One step t: u' = LN(m + MLP(m)) with m = LN(u + Attn(u → tokens)) (eq. 10-11, feature-to-label), then
u⁺ = LN(m' + MLP(m')) with m' = LN(u' + Attn(u' → candidates, masked)) (eq. 12-13, label-to-label). The
readout is the label's own embedding row (W^o ≡ W^y, section 2.4) · its node state + a per-label bias.

Deviations from the paper, for a second stage over C candidates: the nodes are the C candidates of one
text, not all labels; a node starts as its label embedding plus a projection of its first-stage
evidence (score, log rank), and that evidence also reaches the logit through a learned linear term (a
skip path, so a re-ranker with little training starts near the first stage's order); the token states
come from a frozen encoder through a learned LayerNorm; layer norm after each residual (post-norm).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from xtag.models.errors import XtagError

NEG = -1e4  # additive mask for disallowed attention (finite: a fully masked row would give NaN with -inf)


class Attention(nn.Module):
    """Multi-head attention (eq. 15-18) with an additive mask; returns the message and the weights (n × heads ×
    queries × keys), which the exported graph also outputs for explanations (models/explain/lamp.py)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"heads ({heads}) must divide the node size ({dim})")
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, q_len, dim = x.shape
        dh = dim // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(n, -1, self.heads, dh).transpose(1, 2)

        scores = split(self.q(x)) @ split(self.k(memory)).transpose(-1, -2) / math.sqrt(dh)
        p = torch.softmax(scores + bias, dim=-1)
        return self.out((p @ split(self.v(memory))).transpose(1, 2).reshape(n, q_len, dim)), p


class Update(nn.Module):
    """m = LN(u + drop(message)); u_new = LN(m + drop(MLP(m))): the update function U_mlp with residuals."""

    def __init__(self, dim: int, ffn: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, u: torch.Tensor, message: torch.Tensor) -> torch.Tensor:
        m = self.norm1(u + self.drop(message))
        return self.norm2(m + self.drop(self.mlp(m)))


class Step(nn.Module):
    """One message-passing step: feature-to-label, then label-to-label; returns both new states and both
    attentions' weights."""

    def __init__(self, dim: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.xy, self.yy = Attention(dim, heads), Attention(dim, heads)
        self.xy_update, self.yy_update = Update(dim, ffn, dropout), Update(dim, ffn, dropout)

    def forward(self, u, tokens, token_bias, label_bias) -> tuple[torch.Tensor, ...]:
        message, to_tokens = self.xy(u, tokens, token_bias)
        u_mid = self.xy_update(u, message)
        message, to_labels = self.yy(u_mid, u_mid, label_bias)
        return u_mid, self.yy_update(u_mid, message), to_tokens, to_labels


def evidence(scores: torch.Tensor) -> torch.Tensor:
    """n × C × 2: each candidate's first-stage score and log(1 + rank) (candidates come best first)."""
    rank = torch.cumsum(torch.ones_like(scores), dim=1) - 1
    return torch.stack([scores, torch.log1p(rank)], dim=-1)


class LampHead(nn.Module):
    """The LaMP layers over token states: (states, token mask, candidates, scores, label mask) → readouts.

    Token states (the encoder's width) are projected to the node size `dim`, smaller than the encoder's by
    default: the attention and MLP cost grow with dim², and on CPU they are the whole training step."""

    def __init__(self, n_labels: int, in_dim: int, dim: int, steps: int, heads: int, ffn_factor: int, dropout: float):
        super().__init__()
        self.embedding = nn.Embedding(n_labels, dim)  # W^y, also the readout W^o
        self.bias = nn.Embedding(n_labels, 1)
        nn.init.zeros_(self.bias.weight)
        self.evidence_in = nn.Linear(2, dim)
        self.evidence_out = nn.Linear(2, 1)
        self.token_in = nn.Linear(in_dim, dim)
        self.token_norm = nn.LayerNorm(dim)
        self.steps = nn.ModuleList(Step(dim, heads, ffn_factor * dim, dropout) for _ in range(steps))

    def readout(self, u: torch.Tensor, candidates: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        """Eq. 14 before the sigmoid: W^o_c · u_c + b_c, plus the first-stage evidence's linear term."""
        return (self.embedding(candidates) * u).sum(-1) + self.bias(candidates)[..., 0] + skip

    def forward(self, states, attention_mask, candidates, scores, label_mask) -> list[torch.Tensor]:
        """Every readout, in order: after each feature-to-label and label-to-label update; the last is final."""
        return self.passes(states, attention_mask, candidates, scores, label_mask)[0]

    def passes(self, states, attention_mask, candidates, scores, label_mask):
        """(every readout, the last step's (feature-to-label, label-to-label) weights averaged over heads).

        The explanation reads the last step (the paper's figure 2 shows the first, summed over heads): the last
        step's messages are the ones the final readout is computed from, so they say what the returned score
        rests on; the mean over heads keeps each row a distribution (sums to 1), so weights read as shares."""
        ev = evidence(scores)
        skip = self.evidence_out(ev)[..., 0]
        u = self.embedding(candidates) + self.evidence_in(ev)
        tokens = self.token_norm(self.token_in(states))
        token_bias = ((1.0 - attention_mask.to(states.dtype)) * NEG)[:, None, None, :]
        label_bias = ((1.0 - label_mask) * NEG)[:, None, :, :]
        out = []
        for step in self.steps:
            u_mid, u, to_tokens, to_labels = step(u, tokens, token_bias, label_bias)
            out += [self.readout(u_mid, candidates, skip), self.readout(u, candidates, skip)]
        return out, (to_tokens.mean(dim=1), to_labels.mean(dim=1))


class LampNet(nn.Module):
    """Frozen encoder + LaMP head: what the ONNX graph exports (ids, mask, candidates, scores, label mask →
    the final logits, and the last step's attention weights: models/lamp/model.py's OUTPUTS). Training runs
    the head on cached token states instead (training/lamp/train.py)."""

    def __init__(
        self,
        transformer: nn.Module,
        n_labels: int,
        dim: int,
        steps: int,
        heads: int,
        ffn_factor: int,
        dropout: float,
    ):
        super().__init__()
        self.transformer = transformer.requires_grad_(False)
        self.hidden = int(transformer.config.hidden_size)
        self.shape = {"n_labels": n_labels, "dim": dim, "steps": steps, "heads": heads, "ffn_factor": ffn_factor}
        self.shape["dropout"] = dropout
        self.head = LampHead(n_labels, self.hidden, dim, steps, heads, ffn_factor, dropout)

    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids, attention_mask, candidates, scores, label_mask) -> tuple[torch.Tensor, ...]:
        """(logits n × C, token attention n × C × tokens, label attention n × C × C)."""
        states = self.states(input_ids, attention_mask)
        readouts, (to_tokens, to_labels) = self.head.passes(states, attention_mask, candidates, scores, label_mask)
        return readouts[-1], to_tokens, to_labels


def first_layers(transformer: nn.Module, layers: int | None) -> nn.Module:
    """The encoder cut to its first `layers` layers (None: all), its config saying so, so that it saves and
    loads as that smaller model: fewer layers is the cheapest way to a faster re-ranker on CPU. With 0 the
    token states are the embedding layer's output (each token's word and position vectors, layer-normalised):
    LaMP then attends to the words without any context, for the cost of a table lookup."""
    if layers is None:
        return transformer
    stack = getattr(getattr(transformer, "encoder", None), "layer", None)
    if not isinstance(stack, nn.ModuleList):
        raise XtagError("lamp.encoder_layers: the encoder has no encoder.layer stack (BERT-like models only)")
    if not 0 <= layers <= len(stack):
        raise XtagError(f"lamp.encoder_layers: {layers}, the encoder has {len(stack)} layers")
    transformer.encoder.layer = stack[:layers]
    transformer.config.num_hidden_layers = layers
    return transformer
