"""LightXML's label embeddings: discriminator logits E_l · h for each document's own candidate labels.

Small label sets: a numpy gather + einsum. Large ones (`use_faiss`): the embeddings live in a FAISS
inner-product index (lightxml/labels.faiss) and FAISS computes each document's candidate products
straight from the index storage (fvec_inner_products_by_idx), without building the
documents × candidates × dim gather tensor. Both paths give the same scores (float32 rounding aside).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from xtag.models.files.atomic import replacing, write_atomic

EMBEDDINGS_FILE, INDEX_FILE = "label_embeddings.npy", "labels.faiss"


class LabelIndex:
    def __init__(self, embeddings: np.ndarray, use_faiss: bool = False):
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.index = None
        if use_faiss:
            import faiss

            self.index = faiss.IndexFlatIP(self.embeddings.shape[1])
            self.index.add(self.embeddings)
            # Read the vectors back from the index storage, so scoring uses exactly what the index holds.
            self.embeddings = faiss.rev_swig_ptr(self.index.get_xb(), self.index.ntotal * self.index.d).reshape(
                self.index.ntotal, self.index.d
            )

    @property
    def dim(self) -> int:
        return self.embeddings.shape[1]

    def scores(self, h: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """n × m logits h_i · E[labels[i, j]] (entries with label -1 are 0; callers mask them)."""
        safe = np.ascontiguousarray(np.maximum(labels, 0), dtype=np.int64)
        if self.index is None:
            return np.einsum("nd,nmd->nm", h, self.embeddings[safe], optimize=True).astype(np.float32)
        import faiss

        h = np.ascontiguousarray(h, dtype=np.float32)
        out = np.empty(safe.shape, dtype=np.float32)
        faiss.fvec_inner_products_by_idx(
            faiss.swig_ptr(out),
            faiss.swig_ptr(h),
            faiss.swig_ptr(self.embeddings),
            faiss.swig_ptr(safe),
            self.dim,
            safe.shape[0],
            safe.shape[1],
        )
        return out

    def save(self, folder: Path) -> None:
        if self.index is not None:
            import faiss

            with replacing(folder / INDEX_FILE) as tmp:
                faiss.write_index(self.index, str(tmp))
        else:
            write_atomic(folder / EMBEDDINGS_FILE, lambda fh: np.save(fh, self.embeddings))

    @staticmethod
    def load_embeddings(folder: Path) -> np.ndarray:
        if (folder / INDEX_FILE).is_file():
            import faiss

            index = faiss.read_index(str(folder / INDEX_FILE))
            return index.reconstruct_n(0, index.ntotal)
        return np.load(folder / EMBEDDINGS_FILE, allow_pickle=False)
