"""The embeddings an XR-Transformer update may take from the run instead of encoding the texts again.

The update keeps the run's encoder as it is, so an old row whose text did not change still has the
embedding the run computed for it. Two files hold such embeddings, one row per row of the run's
training corpus (what this module relies on):
- a trained run's checkpoints/xr/emb_<D>.npy: the cache that train_xr_transformer's last
  `Embeddings.get` leaves, computed under the final encoder (the one saved as model/encoder), from
  which the run's Φ_cat was built (`train.final_embeddings_file` says which level D);
- an updated run's checkpoints/update/embeddings.npy, which `save_kept` writes with
  embeddings.json, a digest of the encoder folder they came from: an updated run retrained in place
  (`xtag train --resume`) gets a new encoder, and then only its training cache holds.
Either is used only when the run's corpus.json (the fingerprint of the rows it was trained on) is
that of its training corpus as read now and the file has one row per row of it, of the encoder's
width; otherwise the update encodes every row and its log says why.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from xtag.corpus.files import Corpus
from xtag.models.files.atomic import write_atomic, write_text_atomic
from xtag.training.xr_transformer.config import XRTransformerConfig
from xtag.training.xr_transformer.train import final_embeddings_file

UPDATE_FOLDER = "update"  # under a run's checkpoints/
EMBEDDINGS, DIGEST = "embeddings.npy", "embeddings.json"


def encoder_digest(folder: Path) -> str:
    """sha256 over the encoder folder's files (names and bytes): which encoder a saved embedding came from."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()


def _candidate(run: Path, xc: XRTransformerConfig, digest: str) -> tuple[Path | None, str]:
    """The file to try (an update's own first), or None and why there is none."""
    own = run / "checkpoints" / UPDATE_FOLDER
    if (own / EMBEDDINGS).is_file() and (own / DIGEST).is_file():
        if json.loads((own / DIGEST).read_text()).get("encoder_sha256") == digest:
            return own / EMBEDDINGS, ""
    trained = final_embeddings_file(run / "checkpoints" / "xr", xc)
    if trained is None or not trained.is_file():
        return None, f"{trained or run / 'checkpoints' / 'xr' / 'emb_*.npy'}: no final training embeddings"
    return trained, ""


def load_kept(
    run: Path, old: Corpus, rows_differ: str, xc: XRTransformerConfig, dim: int, digest: str
) -> tuple[np.ndarray | None, str]:
    """The embeddings of the run's training rows (len(old) × dim) under the encoder whose `encoder_digest` is
    `digest`, and the file they came from; or None and why not (`rows_differ`: the fingerprint check's answer,
    CorpusFingerprint.differs_from_run)."""
    if rows_differ:
        return None, f"{old.source}: {rows_differ}"
    try:
        path, why = _candidate(run, xc, digest)
        if path is None:
            return None, why
        E = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:  # a damaged file costs the encoding time, not the update
        return None, f"unreadable: {exc}"
    if E.shape != (len(old), dim):
        return None, f"{path}: {E.shape[0]} × {E.shape[1]} embeddings for {len(old)} rows of width {dim}"
    return np.asarray(E, dtype=np.float32), str(path)


def save_kept(checkpoints: Path, E: np.ndarray, digest: str) -> None:
    """The combined corpus's embeddings under the kept encoder, for a later update of the new run."""
    folder = checkpoints / UPDATE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / EMBEDDINGS, lambda fh: np.save(fh, E))
    write_text_atomic(folder / DIGEST, json.dumps({"encoder_sha256": digest, "rows": len(E)}))
