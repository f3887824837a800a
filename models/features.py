"""TF-IDF featuriser: scikit-learn's vectoriser, saved as data (vocabulary + idf), never pickled."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from sklearn.feature_extraction.text import TfidfVectorizer

from models.errors import XtagError

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
    def fit(cls, texts: list[str], config: TfidfConfig | None = None) -> tuple["TfidfFeaturizer", sp.csr_matrix]:
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
            return self._transform_few(texts)
        return self.vectorizer.transform(texts).tocsr()

    def _transform_few(self, texts: list[str]) -> sp.csr_matrix:
        """The same matrix as scikit-learn's transform (tests compare them), for a handful of texts.

        Hand-written because scikit-learn spends ~1 ms per call on input validation and sparse
        bookkeeping, about five times the tokenising and counting, and a one-text request pays all
        of it. Tokens still come from scikit-learn's analyzer; only counting, sublinear tf, idf and
        l2 normalisation happen here, with the vectoriser's settings.
        """
        vocab, idf = self.vectorizer.vocabulary_, self.vectorizer.idf_
        indptr, indices, counts = [0], [], []
        for text in texts:
            found = Counter(j for j in map(vocab.get, self._analyze(text)) if j is not None)
            for j in sorted(found):
                indices.append(j)
                counts.append(found[j])
            indptr.append(len(indices))
        cols = np.asarray(indices, dtype=np.int32)
        tf = np.asarray(counts, dtype=np.float64)
        if self.vectorizer.sublinear_tf:
            tf = np.log(tf) + 1.0
        data = tf * idf[cols]
        rows = np.repeat(np.arange(len(texts)), np.diff(indptr))
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(texts)))
        data /= np.where(norms > 0, norms, 1.0)[rows]
        return sp.csr_matrix((data.astype(np.float32), cols, np.asarray(indptr, dtype=np.int32)),
                             shape=(len(texts), len(vocab)))

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        vocab = {term: int(i) for term, i in self.vectorizer.vocabulary_.items()}
        (folder / "vocabulary.json").write_text(json.dumps(vocab, ensure_ascii=False))
        np.save(folder / "idf.npy", self.vectorizer.idf_.astype(np.float64))
        (folder / "config.json").write_text(self.config.model_dump_json(indent=2))

    @classmethod
    def load(cls, folder: Path) -> "TfidfFeaturizer":
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
