"""Why LaMP returned a label: the words it attended to and the other returned labels it listened to.

The re-ranker's graph outputs its last message-passing step's attention weights, averaged over heads
(training/lamp/net.py says why that step): each candidate's feature-to-label weights over the text's tokens
and its label-to-label weights over the candidates, each row a distribution. Explaining reruns the first
stage's candidates and the graph with those outputs (as models/explain/linear.py featurises again), so the plain
path fetches the logits alone. A label's explanation is its first stage's (`words`, `path_score`, `levels`,
when the first stage has TF-IDF features: they explain why it became a candidate) plus:

- `attended_words`: the encoder's sub-word tokens merged into the words of the text they came from (the
  tokenizer's word ids and offsets), a word's weight the sum of its tokens' and of its repeats' (lowercased,
  as `words` terms are); special tokens and punctuation are no words; the largest TOP_TERMS.
- `supporting_labels`: the other returned labels with the largest label-to-label weight from this label
  (pairs that LaMP_pr's graph masks have weight 0 and are left out), largest TOP_TERMS.

A bundle exported before the graph had attention outputs still explains with its first stage's explanation
and a `note` saying the re-ranker's attention is not in it: what the first stage says stays true, and a
422 would refuse an explanation the bundle can give. With neither (no TF-IDF first stage either) it is
ExplainUnavailable. The candidates are recomputed at the bundle's beam and the request's width
(max(C, k)): a request's own beam_size or reweighting (which widens the candidate lists) can make a returned
label's candidate set differ, and a label that is not among the recomputed candidates says so in `note`.
"""

from __future__ import annotations

import numpy as np
from xtag.models.explain.linear import DIGITS, TOP_TERMS, Explainer, ExplainUnavailable
from xtag.models.inference.stopping import check
from xtag.models.lamp.model import LampModel

NO_ATTENTION = (
    "this bundle's re-ranker was exported without its attention outputs (before LaMP explanations): re-export "
    "the run for attended_words and supporting_labels; the explanation above is the first stage's"
)
NOT_A_CANDIDATE = "not among the re-ranker's candidates recomputed at the bundle's beam: no attention to show"
FIRST_STAGE_ONLY = "rerank: false answers with the first stage, which has no TF-IDF features to explain"


def text_words(encoding, text: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(token positions, their word's column, the words): each token that belongs to a word of `text` with a
    letter or digit in it, the word lowercased; repeats of a word share one column."""
    spans: dict[int, list[int]] = {}
    for position, (word, (start, end)) in enumerate(zip(encoding.word_ids, encoding.offsets)):
        if word is not None and end > start:
            spans.setdefault(word, []).append(position)
    columns: dict[str, int] = {}
    positions, owners = [], []
    for tokens in spans.values():
        start, end = encoding.offsets[tokens[0]][0], encoding.offsets[tokens[-1]][1]
        word = text[start:end].lower()
        if not any(ch.isalnum() for ch in word):
            continue
        column = columns.setdefault(word, len(columns))
        positions += tokens
        owners += [column] * len(tokens)
    return np.array(positions, dtype=np.int64), np.array(owners, dtype=np.int64), list(columns)


def top_shares(values: np.ndarray, top: int) -> tuple[np.ndarray, list[float]]:
    """The indices of the `top` largest values that round above 0, largest first (ties: the lower index)."""
    order = np.argsort(-values, kind="stable")[:top]
    rounded = [round(float(v), DIGITS) for v in values[order]]
    kept = [i for i, v in enumerate(rounded) if v > 0]
    return order[kept], [rounded[i] for i in kept]


class LampExplainer:
    """Explanations for a LaMP bundle's returned labels; built once per loaded bundle (`for_model`)."""

    def __init__(self, model: LampModel, first: Explainer | None):
        self.model, self.first = model, first
        self.names = model.first.vocab.names

    @classmethod
    def for_model(cls, model: LampModel) -> LampExplainer:
        try:
            first = Explainer.for_predictor(model.first)
        except ExplainUnavailable:
            first = None
        if first is None and not model.reranker.has_attention:
            raise ExplainUnavailable(
                "the first stage has no TF-IDF features and the LaMP re-ranker was exported without its attention "
                "outputs (before LaMP explanations): re-export the run to explain it"
            )
        return cls(model, first)

    def explain(
        self, texts: list[str], labels: list[list[int]], top: int = TOP_TERMS, rerank: bool = True
    ) -> list[list[dict]]:
        """For each text, one explanation per label id of `labels` (its returned labels), in that order;
        `rerank=False` (the first stage answered alone): the first stage's explanation only."""
        if self.first is not None:
            out = self.first.explain(texts, labels, top)
        else:
            out = [[{} for _ in row] for row in labels]
        if not rerank:
            return out if self.first is not None else [[{"note": FIRST_STAGE_ONLY} for _ in row] for row in out]
        if not self.model.reranker.has_attention:
            return [[{**e, "note": NO_ATTENTION} for e in row] for row in out]
        width = max((len(row) for row in labels), default=1)
        cand = self.model.candidates(texts, max(width, 1), None)
        weights = self.model.reranker.attention(texts, cand.labels, cand.scores)
        encodings = self.model.reranker.onnx.tokenizer.tokenizer.encode_batch(list(texts))
        for d, row in enumerate(labels):
            check()  # between two documents, a call nobody waits for stops (models/inference/stopping.py)
            to_tokens, to_labels = weights[d]
            where = {int(j): c for c, j in enumerate(cand.labels[d].tolist()) if j >= 0}
            words = self._words(encodings[d], texts[d], to_tokens)
            returned = [(j, where[j]) for j in row if j in where]
            for explanation, label in zip(out[d], row):
                c = where.get(label)
                if c is None:
                    explanation["note"] = NOT_A_CANDIDATE
                    continue
                explanation["attended_words"] = words(c, top)
                explanation["supporting_labels"] = self._supporting(label, to_labels[c], returned, top)
        return out

    def _words(self, encoding, text: str, to_tokens: np.ndarray):
        """candidate position, top → that candidate's attended words [{term, weight}]."""
        if len(encoding.ids) != to_tokens.shape[1]:
            raise ValueError(f"{len(encoding.ids)} tokens, {to_tokens.shape[1]} attention columns")
        positions, owners, terms = text_words(encoding, text)
        owner = np.zeros((len(positions), len(terms)))
        owner[np.arange(len(positions)), owners] = 1.0
        per_word = to_tokens[:, positions].astype(np.float64) @ owner  # candidates × words

        def words(c: int, top: int) -> list[dict]:
            order, shares = top_shares(per_word[c], top)
            return [{"term": terms[j], "weight": w} for j, w in zip(order.tolist(), shares)]

        return words

    def _supporting(self, label: int, row: np.ndarray, returned: list[tuple[int, int]], top: int) -> list[dict]:
        others = [(j, c) for j, c in returned if j != label]
        values = np.array([row[c] for _, c in others], dtype=np.float64)
        order, shares = top_shares(values, top)
        return [
            {"id": others[i][0], "name": self.names[others[i][0]], "weight": w} for i, w in zip(order.tolist(), shares)
        ]
