"""model2vec's recipe with the project's own stack: every vocabulary token through the teacher, PCA, SIF weights.

model2vec's own `[distill]` extra is not used: it pins transformers<5.4, older than the transformers this
project trains with; the recipe is three steps on top of training/deep/encoder.py and scikit-learn.
"""

from __future__ import annotations

import numpy as np
from sklearn.decomposition import PCA
from tokenizers import Tokenizer
from xtag.models.errors import XtagError
from xtag.models.features.static_encoder import token_ids


def special_ids(tokenizer: Tokenizer) -> np.ndarray:
    """Ids of the tokenizer's special tokens ([CLS], [PAD], [UNK], ...): they weigh 0 in a text."""
    return np.array(sorted(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special), dtype=np.int64)


def token_statistics(tokenizer: Tokenizer, texts: list[str], sif: float) -> tuple[np.ndarray, np.ndarray]:
    """(SIF weights a/(a+p_t), idf) per vocabulary token, from the training texts' token counts.

    p_t is the token's share of all training tokens; tokens never seen in training get p = 0, so weight 1 (a
    rare token is informative, and unseen synonyms are what the static block is for). idf is scikit-learn's
    smoothed log((1+n)/(1+df)) + 1 over the training texts. Special tokens weigh 0.
    """
    vocab = tokenizer.get_vocab_size()
    ids, indptr = token_ids(tokenizer, texts)
    counts = np.bincount(ids, minlength=vocab).astype(np.float64)
    weights = sif / (sif + counts / max(counts.sum(), 1.0))
    rows = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(indptr))
    df = np.bincount(np.unique(rows * vocab + ids) % vocab, minlength=vocab)
    idf = np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0
    weights[special_ids(tokenizer)] = 0.0
    return weights.astype(np.float32), idf.astype(np.float32)


def reduce(vectors: np.ndarray, dim: int) -> PCA:
    """PCA of the token vectors to `dim` columns (model2vec's step: it also centres the table, which removes the
    direction every token shares and leaves what tells tokens apart)."""
    if dim > vectors.shape[1]:
        raise XtagError(f"dense.dim {dim} is larger than the teacher's hidden size {vectors.shape[1]}")
    return PCA(n_components=dim, svd_solver="full").fit(vectors)
