"""TF-IDF featuriser: scikit-learn's vectoriser, saved as data (vocabulary + idf), never pickled."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from sklearn.feature_extraction.text import TfidfVectorizer
from xtag.models.errors import XtagError

# Up to this many texts, `transform` skips scikit-learn's transform (see _transform_few).
FEW_TEXTS = 8


class TfidfConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ngram_max: int = Field(2, ge=1, le=3, description="word n-grams 1..ngram_max")
    min_df: int = Field(2, ge=1, description="drop terms seen in fewer training documents")
    max_features: int | None = Field(None, ge=1)
    sublinear_tf: bool = True
    lowercase: bool = True


class TfidfFeaturizer:
    """Word uni+bigram TF-IDF with sublinear tf and l2-normalised rows, fitted on training texts only."""

    def __init__(self, vectorizer: TfidfVectorizer, config: TfidfConfig):
        self.vectorizer, self.config = vectorizer, config
        self._analyze = vectorizer.build_analyzer()  # scikit-learn's own tokeniser + n-grams

    @staticmethod
    def _vectorizer(config: TfidfConfig, vocabulary: dict[str, int] | None = None) -> TfidfVectorizer:
        return TfidfVectorizer(
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
        return cls(vectorizer, config), X.tocsr()

    @property
    def dim(self) -> int:
        return len(self.vectorizer.vocabulary_)

    def transform(self, texts: list[str]) -> sp.csr_matrix:
        if len(texts) <= FEW_TEXTS:
            data, indices, indptr = self.transform_arrays(texts)
            return sp.csr_matrix((data, indices, indptr), shape=(len(texts), self.dim))
        return self.vectorizer.transform(texts).tocsr()

    def transform_arrays(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(data, indices, indptr) of `transform(texts)` (sorted indices), without a scipy object: callers
        that only read the arrays (Φ_cat's featuriser) skip its construction.

        Up to FEW_TEXTS texts this is hand-written, because scikit-learn's per-call input validation
        and sparse bookkeeping cost several times the tokenising and counting (bench/RESULTS.md,
        issue 4's latency runs), and a one-text request pays all of it. Tokens still come from scikit-learn's analyzer; only counting,
        sublinear tf, idf and l2 normalisation happen here, with the vectoriser's settings (tests
        compare the result with scikit-learn's transform).
        """
        if len(texts) > FEW_TEXTS:
            X = self.vectorizer.transform(texts).tocsr()
            X.sort_indices()
            return X.data, X.indices, X.indptr
        vocab, idf = self.vectorizer.vocabulary_, self.vectorizer.idf_
        cols, counts, indptr = [], [], [0]
        for text in texts:
            ids = [j for j in map(vocab.get, self._analyze(text)) if j is not None]
            c, n = np.unique(np.asarray(ids, dtype=np.int32), return_counts=True)
            cols.append(c)
            counts.append(n)
            indptr.append(indptr[-1] + len(c))
        indices = np.concatenate(cols) if cols else np.empty(0, np.int32)
        tf = np.concatenate(counts).astype(np.float64) if counts else np.empty(0)
        if self.vectorizer.sublinear_tf:
            tf = np.log(tf) + 1.0
        data = tf * idf[indices]
        rows = np.repeat(np.arange(len(texts)), np.diff(indptr))
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(texts)))
        data /= np.where(norms > 0, norms, 1.0)[rows]
        return data.astype(np.float32), indices, np.asarray(indptr, dtype=np.int32)

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        vocab = {term: int(i) for term, i in self.vectorizer.vocabulary_.items()}
        (folder / "vocabulary.json").write_text(json.dumps(vocab, ensure_ascii=False))
        np.save(folder / "idf.npy", self.vectorizer.idf_.astype(np.float64))
        (folder / "config.json").write_text(self.config.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> TfidfFeaturizer:
        try:
            config = TfidfConfig.model_validate_json((folder / "config.json").read_text())
            vocab = json.loads((folder / "vocabulary.json").read_text(encoding="utf-8"))
            idf = np.load(folder / "idf.npy", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise XtagError(f"{folder}: cannot read the TF-IDF featuriser ({exc})") from exc
        if len(idf) != len(vocab):
            raise XtagError(f"{folder}: idf has {len(idf)} entries for a vocabulary of {len(vocab)}")
        vectorizer = cls._vectorizer(config, vocabulary=vocab)
        vectorizer.idf_ = idf
        return cls(vectorizer, config)
