"""XR-Transformer's `xtag update`: the run's encoder kept as it is, its XR-Linear rankers grown on Φ_cat.

The combined corpus is embedded with the run's fine-tuned encoder (model/encoder), on the device the
run's `device` setting picks as training does; old rows whose text is unchanged take the run's saved
embeddings instead (kept_embeddings.py says which files, and when every row is encoded instead). Φ_cat
is then built as training builds it (train.phi_cat), and the tree grows and the changed rankers are
retrained by XR-Linear's own `update_rankers`: this family's entry is XR-Linear's `ranker_update` with Φ_cat as
the features. RUN2 holds a byte-for-byte copy of the encoder, so `xtag export` turns it into a bundle as it does
a trained run, and keeps the combined corpus's embeddings for a later update.

The issue's optional short fine-tuning on the new documents is not done, on purpose: fine-tuning moves
every document's embedding, so every ranker would have to be retrained, which costs a full retrain's
ranker time on top of the fine-tuning. A re-tuned encoder comes from a retrain on the combined corpus
(`xtag train --config RUN2/config.json --out RUN3`, or `xtag train --resume --out RUN2` in place).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from xtag.models.families import RunResult, UpdateInputs
from xtag.models.xlinear.model import XLinearModel
from xtag.training.deep.distributed import pick_device
from xtag.training.deep.encoder import encode_texts, load_tokenizer, load_trained, trained_config
from xtag.training.xlinear.update import ranker_update
from xtag.training.xr_transformer.kept_embeddings import encoder_digest, load_kept, save_kept
from xtag.training.xr_transformer.train import phi_cat


@dataclass
class XRUpdateResult(RunResult):
    """The updated rankers plus the run's encoder folder, copied rather than serialised again (it is unchanged)."""

    model: XLinearModel
    encoder: Path

    def save(self, folder: Path) -> None:
        self.model.save(folder)
        shutil.copytree(self.encoder, folder / "encoder")

    def summary(self) -> dict:
        return {"features": self.model.config.n_features}


def embed(
    data: UpdateInputs, config, digest: str, progress: bool, log: Callable[[dict], None]
) -> tuple[np.ndarray, dict]:
    """The combined corpus's embeddings under the run's encoder (whose `encoder_digest` is `digest`): kept rows from
    the run's files, the rest encoded; and how many of each."""
    xc = config.xr_transformer
    folder = data.run / "model" / "encoder"
    enc_config = trained_config(folder)  # the weights are loaded only if some row has to be encoded
    texts = data.corpus.texts
    E = np.empty((len(texts), enc_config.dim), dtype=np.float32)
    todo = np.arange(len(texts))
    kept, source = load_kept(data.run, data.old, data.old_rows_differ, xc, enc_config.dim, digest)
    if kept is None:
        log({"event": "embeddings", "reused": 0, "why": f"encoding every row: {source}"})
    else:  # an embedding is a function of the text alone: a replaced row with the same text keeps it too
        same = data.same_text
        E[: len(same)][same] = kept[same]
        todo = np.concatenate([np.flatnonzero(~same), np.arange(len(same), len(texts))])
        log({"event": "embeddings", "reused": int(same.sum()), "source": source})
    start = time.perf_counter()
    device = pick_device(xc.device)
    if len(todo):
        encoder, _ = load_trained(folder)
        tokenizer = load_tokenizer(folder, enc_config.max_length)
        part = [texts[i] for i in todo]
        E[todo] = encode_texts(
            encoder.to(device), tokenizer, part, xc.encode_batch_size, device, xc.amp, progress, "encode (update)"
        )
    seconds = time.perf_counter() - start
    log(
        {
            "event": "encode",
            "what": "update",
            "documents": len(todo),
            "device": str(device),
            "seconds": round(seconds, 3),
            "docs_per_s": round(len(todo) / max(seconds, 1e-9), 2),
        }
    )
    return E, {"encoded_documents": len(todo), "reused_embeddings": len(texts) - len(todo)}


def features(data: UpdateInputs, config, progress: bool, log: Callable[[dict], None]) -> tuple[sp.csr_matrix, dict]:
    """Φ_cat of the combined corpus as training builds it, under the run's encoder; the embeddings are kept in
    RUN2 for a later update."""
    digest = encoder_digest(data.run / "model" / "encoder")
    E, encoding = embed(data, config, digest, progress, log)
    save_kept(data.checkpoints, E, digest)
    return phi_cat(data.X, E, config.xr_transformer), encoding


update = ranker_update(features, lambda model, data: XRUpdateResult(model, data.run / "model" / "encoder"))
