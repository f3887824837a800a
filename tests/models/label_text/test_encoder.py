"""The label-text encoder as data: unit rows (zero for a text with nothing known, never NaN), both sides, every
kind, and a save/load round trip without pickle that refuses broken files by name."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.errors import XtagError
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
from xtag.models.label_text.encoder import LabelTextEncoder, LabelTextEncoderConfig

from tests.models.features.test_static_encoder import make_encoder as make_static

TEXTS = ["car engine wheel", "bread cheese soup", "guitar drum song", "rain snow storm", "car bread"]


def tfidf() -> TfidfFeaturizer:
    return TfidfFeaturizer.fit(TEXTS, TfidfConfig(ngram_max=1, min_df=1))[0]


def make(kind: str = "tfidf-linear", dim: int = 4, shared: bool = False, seed: int = 0) -> LabelTextEncoder:
    rng = np.random.default_rng(seed)
    config = LabelTextEncoderConfig(kind=kind, dim=dim, shared=shared)
    if kind == "tfidf":
        featurizer = tfidf()
        return LabelTextEncoder(config.model_copy(update={"dim": featurizer.dim}), tfidf=featurizer)
    if kind == "static-linear":
        static = make_static()
        width, features = static.dim, {"static": static}
    else:
        featurizer = tfidf()
        width, features = featurizer.dim, {"tfidf": featurizer}
    sides = ("document",) if shared else ("document", "label")
    towers = {side: rng.normal(size=(width, dim)).astype(np.float32) for side in sides}
    return LabelTextEncoder(config, towers=towers, **features)


@pytest.mark.parametrize("kind", ["tfidf", "tfidf-linear", "static-linear"])
def test_rows_are_unit_or_zero_never_nan(kind):
    encoder = make(kind)
    texts = ["car engine", "", "qqq zzz", "apple banana", "soup"]
    for encode in (encoder.encode_documents, encoder.encode_labels):
        out = encode(texts)
        dense = out.toarray() if sp.issparse(out) else out
        assert sp.issparse(out) == (kind == "tfidf") == encoder.sparse
        assert dense.shape == (len(texts), encoder.dim) and dense.dtype == np.float32
        assert np.isfinite(dense).all()
        norms = np.linalg.norm(dense, axis=1)
        assert np.allclose(norms[norms > 0], 1.0, atol=1e-5)
        assert norms[1] == 0 and norms[2] == 0  # nothing known: a zero row


def test_documents_and_labels_go_through_their_own_tower():
    encoder = make("tfidf-linear")
    assert not np.allclose(encoder.encode_documents(["car engine"]), encoder.encode_labels(["car engine"]))
    shared = make("tfidf-linear", shared=True)
    assert np.allclose(shared.encode_documents(["car engine"]), shared.encode_labels(["car engine"]))


@pytest.mark.parametrize("kind,shared", [("tfidf", False), ("tfidf-linear", False), ("tfidf-linear", True)])
def test_save_load_round_trip_as_data(tmp_path, kind, shared):
    encoder = make(kind, shared=shared)
    encoder.save(tmp_path / "enc")
    back = LabelTextEncoder.load(tmp_path / "enc")
    assert back.config == encoder.config
    for a, b in (
        (encoder.encode_documents(TEXTS), back.encode_documents(TEXTS)),
        (encoder.encode_labels(TEXTS), back.encode_labels(TEXTS)),
    ):
        a, b = (x.toarray() if sp.issparse(x) else x for x in (a, b))
        assert np.array_equal(a, b)
    suffixes = {p.suffix for p in (tmp_path / "enc").rglob("*") if p.is_file()}
    assert suffixes <= {".json", ".npy", ".safetensors"}


def test_static_linear_round_trip(tmp_path):
    encoder = make("static-linear")
    encoder.save(tmp_path / "enc")
    back = LabelTextEncoder.load(tmp_path / "enc")
    assert np.allclose(back.encode_labels(["apple fig"]), encoder.encode_labels(["apple fig"]))


def test_a_tower_of_the_wrong_shape_is_refused():
    featurizer = tfidf()
    config = LabelTextEncoderConfig(kind="tfidf-linear", dim=4)
    towers = {"document": np.zeros((featurizer.dim, 4)), "label": np.zeros((featurizer.dim + 1, 4))}
    with pytest.raises(XtagError, match="label tower"):
        LabelTextEncoder(config, tfidf=featurizer, towers=towers)
    with pytest.raises(XtagError, match="no static token table"):
        LabelTextEncoder(LabelTextEncoderConfig(kind="static-linear", dim=4))


def test_a_missing_or_broken_file_is_named(tmp_path):
    make("tfidf-linear").save(tmp_path / "enc")
    (tmp_path / "enc" / "towers.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(XtagError, match="towers.safetensors"):
        LabelTextEncoder.load(tmp_path / "enc")
    (tmp_path / "enc" / "config.json").unlink()
    with pytest.raises(XtagError, match="config.json"):
        LabelTextEncoder.load(tmp_path / "enc")
