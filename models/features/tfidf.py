"""TF-IDF featuriser: scikit-learn's vectoriser, saved as data (vocabulary + idf), never pickled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import orjson
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from xtag.models.errors import XtagError

# `transform` counts at most this many texts at a time: its token ids are Python ints until counted.
CHUNK_TEXTS = 4096


class TfidfConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ngram_max: int = Field(2, ge=1, le=3, description="word n-grams 1..ngram_max")
    min_df: int = Field(2, ge=1, description="drop terms seen in fewer training documents")
    max_features: int | None = Field(None, ge=1)
    sublinear_tf: bool = True
    lowercase: bool = True


TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # scikit-learn's default word pattern, which fit() uses


class TfidfFeaturizer:
    """Word uni+bigram TF-IDF with sublinear tf and l2-normalised rows, fitted on training texts only.

    scikit-learn fits it; a fitted featuriser is its vocabulary and idf, and transforms without scikit-learn
    (transform_arrays), so serving never imports it: that import alone took over a second of `xtag serve`'s
    start (issue 28)."""

    encodes = False  # the Featurizer contract (models/inference/predictor.py)

    def __init__(self, vocabulary: dict[str, int], idf: np.ndarray, config: TfidfConfig):
        self.vocabulary, self.idf, self.config = vocabulary, idf, config
        self._token = re.compile(TOKEN_PATTERN)

    @property
    def vectorizer(self):
        """The equivalent fitted scikit-learn vectoriser (the reference tests and benchmarks compare with)."""
        vectorizer = self._vectorizer(self.config, vocabulary=self.vocabulary)
        vectorizer.idf_ = self.idf  # scikit-learn's setter validates the fixed vocabulary: no fit needed
        return vectorizer

    def _analyze(self, text: str) -> list[str]:
        """scikit-learn's word analyzer for the vectorisers made here (no accent stripping, no stop words), as
        its terms in another order: the tokens, then for each n ≤ ngram_max the n-grams joined by a space.
        Written out because scikit-learn's n-gram loop slices and joins term by term: 30% of its time."""
        tokens = self._token.findall(text.lower() if self.config.lowercase else text)
        terms = list(tokens)
        for n in range(2, self.config.ngram_max + 1):
            terms += map(" ".join, zip(*(tokens[i:] for i in range(n))))
        return terms

    @staticmethod
    def _vectorizer(config: TfidfConfig, vocabulary: dict[str, int] | None = None):
        from sklearn.feature_extraction.text import TfidfVectorizer

        return TfidfVectorizer(
            token_pattern=TOKEN_PATTERN,
            ngram_range=(1, config.ngram_max),
            min_df=config.min_df if vocabulary is None else 1,
            max_features=config.max_features if vocabulary is None else None,
            sublinear_tf=config.sublinear_tf,
            lowercase=config.lowercase,
            norm="l2",
            dtype=np.float32,
            vocabulary=vocabulary,
        )

    @classmethod
    def fit(cls, texts: list[str], config: TfidfConfig | None = None) -> tuple[TfidfFeaturizer, sp.csr_matrix]:
        config = config or TfidfConfig()
        vectorizer = cls._vectorizer(config)
        try:
            X = vectorizer.fit_transform(texts)
        except ValueError as exc:  # e.g. empty vocabulary
            raise XtagError(f"cannot fit TF-IDF on the training texts: {exc}") from exc
        return cls(vectorizer.vocabulary_, vectorizer.idf_, config), X.tocsr()

    @property
    def tfidf(self) -> TfidfFeaturizer:
        """Its TF-IDF block: all of it."""
        return self

    @property
    def dim(self) -> int:
        return len(self.vocabulary)

    def transform(self, texts: list[str]) -> sp.csr_matrix:
        data, indices, indptr = self.transform_arrays(texts)
        return sp.csr_matrix((data, indices, indptr), shape=(len(texts), self.dim))

    def transform_arrays(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, indices, indptr) of scikit-learn's `transform(texts)` (sorted indices), without a scipy object:
        callers that only read the arrays (Φ_cat's featuriser) skip its construction.

        Hand-written for every batch size: terms as scikit-learn's analyzer makes them (_analyze), counting,
        sublinear tf, idf and l2 normalisation happen here, with the vectoriser's settings (tests compare
        the result with scikit-learn's transform). For one text scikit-learn's per-call validation and
        sparse bookkeeping cost several times the tokenising (issue 4's latency runs); for a batch its
        per-token Python counting loop does (issue 28: 256 debdeps texts took 50 ms, 30 ms here, where one
        np.unique counts the whole batch).
        """
        if len(texts) > CHUNK_TEXTS:
            parts = [self.transform_arrays(texts[i : i + CHUNK_TEXTS]) for i in range(0, len(texts), CHUNK_TEXTS)]
            offsets = np.cumsum([0] + [p[2][-1] for p in parts[:-1]])
            indptr = np.concatenate([parts[0][2][:1]] + [p[2][1:] + o for p, o in zip(parts, offsets)])
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), indptr
        vocab, idf, analyze = self.vocabulary, self.idf, self._analyze
        ids: list[int] = []
        lengths = np.zeros(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            row = [j for j in map(vocab.get, analyze(text)) if j is not None]
            ids += row
            lengths[i] = len(row)
        rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        keys, counts = np.unique(rows * self.dim + np.asarray(ids, dtype=np.int64), return_counts=True)
        rows, indices = np.divmod(keys, self.dim)  # keys are sorted: by row, then column
        indptr = np.zeros(len(texts) + 1, dtype=np.int32)
        np.cumsum(np.bincount(rows, minlength=len(texts)), out=indptr[1:])
        tf = counts.astype(np.float64)
        if self.config.sublinear_tf:
            tf = np.log(tf) + 1.0
        data = tf * idf[indices]
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(texts)))
        data /= np.where(norms > 0, norms, 1.0)[rows]
        return data.astype(np.float32), indices.astype(np.int32), indptr

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        vocab = {term: int(i) for term, i in self.vocabulary.items()}
        (folder / "vocabulary.json").write_text(json.dumps(vocab, ensure_ascii=False))
        np.save(folder / "idf.npy", np.asarray(self.idf, dtype=np.float64))
        (folder / "config.json").write_text(self.config.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> TfidfFeaturizer:
        try:
            config = TfidfConfig.model_validate_json((folder / "config.json").read_text())
            vocab = orjson.loads((folder / "vocabulary.json").read_bytes())  # a third faster than json at 270K terms
            idf = np.load(folder / "idf.npy", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise XtagError(f"{folder}: cannot read the TF-IDF featuriser ({exc})") from exc
        check_vocabulary(folder / "vocabulary.json", vocab)
        if idf.dtype.kind != "f" or idf.shape != (len(vocab),):
            raise XtagError(
                f"{folder / 'idf.npy'}: {idf.ndim}-d {idf.dtype} of {idf.size} entries, expected "
                f"{len(vocab)} floats (one per term of the vocabulary)"
            )
        negative = idf < 0
        if negative.any():
            at = int(np.argmax(negative))
            raise XtagError(f"{folder / 'idf.npy'}: idf[{at}] is {float(idf[at])}; an idf is never negative")
        return cls(vocab, idf, config)


def check_vocabulary(path: Path, vocab: object) -> None:
    """Every term's column is an integer in 0..n-1, each column once (scikit-learn's vocabulary is a
    bijection): `transform` indexes the idf and the rankers' columns with them unchecked, so a column of
    50,000,000 or -5 in an edited bundle failed every text with that term (issue 38). Vectorised: 270K terms
    take a few milliseconds; the term at fault is looked up only on failure."""
    if not isinstance(vocab, dict):  # a JSON object's keys are strings: only its values need checking
        raise XtagError(f"{path}: not a mapping of terms to feature columns")
    n = len(vocab)
    columns = np.array(list(vocab.values())) if n else np.empty(0, dtype=np.int64)
    if columns.dtype.kind not in "iu" or columns.ndim != 1:
        term = next(t for t, c in vocab.items() if type(c) is not int or not 0 <= c < n)
        raise XtagError(f"{path}: term {term!r} has column {vocab[term]!r}, not an integer in 0..{n - 1}")
    outside = (columns < 0) | (columns >= n)
    if outside.any():
        term = list(vocab)[int(np.argmax(outside))]
        raise XtagError(f"{path}: term {term!r} has column {vocab[term]}, outside 0..{n - 1} (the feature columns)")
    repeated = np.bincount(columns, minlength=n) > 1
    if repeated.any():
        column = int(np.argmax(repeated))
        terms = [t for t, c in vocab.items() if c == column][:2]
        raise XtagError(f"{path}: column {column} is given to more than one term ({terms[0]!r}, {terms[1]!r})")
