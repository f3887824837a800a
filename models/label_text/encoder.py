"""One encoder for documents and label texts (issue 49): a label with text can be found from a document's text,
including a label no training document carries.

Features, then one linear tower per side (DEXML's and NGAME's dual encoder, asymmetric here: "A depends on B"
is not "A is like B"), then L2. The kinds:
- `tfidf`: TF-IDF cosine, untrained (the baseline row of every table): rows are sparse, the vocabulary's width;
- `tfidf-linear`: TF-IDF × a learned tower per side (vocabulary × dim), contrastively trained;
- `static-linear`: the distilled MiniLM static token embedding (models/features/static_encoder.py) × a learned
  tower per side (its dim × dim).
The encoder owns its featuriser (its own TF-IDF vocabulary or static table), so callers hand it texts only.
Saved as data: config.json, the featuriser's own files, towers.safetensors; nothing pickled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import BaseModel, ConfigDict, Field
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file
from xtag.models.errors import XtagError, reading
from xtag.models.features.static_encoder import StaticEncoder
from xtag.models.features.tfidf import TfidfFeaturizer

Kind = Literal["tfidf", "tfidf-linear", "static-linear"]
CONFIG, TOWERS, TFIDF, STATIC = "config.json", "towers.safetensors", "tfidf", "static"
SIDES = ("document", "label")


class LabelTextEncoderConfig(BaseModel):
    """config.json of a saved encoder: which kind, its width, and whether both sides share one tower."""

    model_config = ConfigDict(extra="forbid")

    kind: Kind
    dim: int = Field(..., ge=1, description="columns of an embedding (the TF-IDF vocabulary's for kind tfidf)")
    shared: bool = Field(False, description="one tower for documents and labels (a siamese encoder)")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to norm 1; a row of zeros (a text with no known term) stays zero, never NaN."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


class LabelTextEncoder:
    """Texts → float32 (n, dim) rows of norm 1 (0 for a text that embeds to nothing); documents and labels
    through their own tower. Kind `tfidf` is the exception in type only: it returns the TF-IDF rows as a CSR
    matrix (`sparse`), since its width is the vocabulary's; `documents @ labels.T` is the cosine either way."""

    def __init__(
        self,
        config: LabelTextEncoderConfig,
        tfidf: TfidfFeaturizer | None = None,
        static: StaticEncoder | None = None,
        towers: dict[str, np.ndarray] | None = None,
    ):
        self.config = config
        self.tfidf, self.static = tfidf, static
        self.towers = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in (towers or {}).items()}
        if config.kind.startswith("tfidf") and tfidf is None:
            raise XtagError(f"label-text encoder {config.kind}: no TF-IDF featuriser")
        if config.kind == "static-linear" and static is None:
            raise XtagError("label-text encoder static-linear: no static token table")
        width = self.tfidf.dim if config.kind.startswith("tfidf") else self.static.dim if self.static else 0
        if config.kind == "tfidf":
            if config.dim != width:
                raise XtagError(f"label-text encoder tfidf: dim {config.dim}, the vocabulary has {width} terms")
            return
        needed = ("document",) if config.shared else SIDES
        for side in needed:
            tower = self.towers.get(side)
            if tower is None or tower.shape != (width, config.dim):
                got = None if tower is None else tower.shape
                raise XtagError(
                    f"label-text encoder {config.kind}: {side} tower is {got}, expected {(width, config.dim)}"
                )
        if config.shared:
            self.towers["label"] = self.towers["document"]

    @property
    def kind(self) -> Kind:
        return self.config.kind

    @property
    def dim(self) -> int:
        return self.config.dim

    @property
    def sparse(self) -> bool:
        """Whether embeddings come as CSR rows (kind tfidf) instead of a dense array."""
        return self.config.kind == "tfidf"

    def features(self, texts: list[str]) -> sp.csr_matrix | np.ndarray:
        """What the towers read: TF-IDF rows (CSR), or the static block's unit rows (dense)."""
        if self.config.kind == "static-linear":
            return self.static.encode(list(texts))
        return self.tfidf.transform(list(texts))

    def _encode(self, texts: list[str], side: str) -> np.ndarray | sp.csr_matrix:
        features = self.features(texts)
        if self.sparse:
            return features  # already L2-normalised rows; empty rows stay empty
        return unit_rows(features @ self.towers[side])

    def encode_documents(self, texts: list[str]) -> np.ndarray | sp.csr_matrix:
        return self._encode(texts, "document")

    def encode_labels(self, texts: list[str]) -> np.ndarray | sp.csr_matrix:
        return self._encode(texts, "label")

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG).write_text(self.config.model_dump_json(indent=2))
        if self.tfidf is not None:
            self.tfidf.save(folder / TFIDF)
        if self.static is not None:
            self.static.save(folder / STATIC)
        if self.config.kind != "tfidf":
            sides = ("document",) if self.config.shared else SIDES
            save_file({side: self.towers[side] for side in sides}, str(folder / TOWERS))

    @classmethod
    def load(cls, folder: Path) -> LabelTextEncoder:
        """Raises an XtagError naming the file at fault when one is missing, unreadable or inconsistent."""
        with reading(folder / CONFIG, "the label-text encoder's configuration"):
            config = LabelTextEncoderConfig.model_validate_json((folder / CONFIG).read_text())
        tfidf = TfidfFeaturizer.load(folder / TFIDF) if config.kind.startswith("tfidf") else None
        static = StaticEncoder.load(folder / STATIC) if config.kind == "static-linear" else None
        towers = None
        if config.kind != "tfidf":
            with reading(folder / TOWERS, "the label-text encoder's towers", SafetensorError):
                towers = load_file(str(folder / TOWERS))
        return cls(config, tfidf=tfidf, static=static, towers=towers)
