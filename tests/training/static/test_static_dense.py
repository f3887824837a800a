"""XR-Linear with a static token block in Φ_cat (issue 24): it reaches labels through synonyms TF-IDF never
saw, the table is distilled and fitted as documented, and the bundle serves the features training used."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import scipy.sparse as sp
from xtag.models.features.static_encoder import StaticEncoder, StaticEncoderConfig
from xtag.models.features.tfidf import TfidfConfig, TfidfFeaturizer
from xtag.models.xlinear.model import XLinearModel
from xtag.models.xr_transformer.concat_features import ConcatFeaturizer, concat_features
from xtag.training.static.distill import token_statistics
from xtag.training.static.tune import ridge_fit
from xtag.training.tree.build import TreeConfig
from xtag.training.xlinear.config import XLinearConfig
from xtag.training.xlinear.train import train_xlinear

from tests.conftest import assert_serves_without_torch
from tests.models.features.test_static_encoder import word_tokenizer

# Each topic's words in training, and synonyms of them that only test texts use.
SEEN = {
    "vehicle": "car truck engine wheel",
    "food": "bread cheese soup salad",
    "music": "guitar drum melody song",
    "weather": "rain snow storm cloud",
    "health": "doctor fever pill nurse",
    "money": "bank loan coin cash",
}
UNSEEN = {
    "vehicle": "automobile lorry motor tyre",
    "food": "loaf brie broth greens",
    "music": "banjo tabla tune ballad",
    "weather": "drizzle sleet gale fog",
    "health": "physician flu tablet medic",
    "money": "lender credit penny funds",
}
FILLER = "the a of and with for some".split()


def _texts(topics: dict[str, str], n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    names = sorted(topics)
    texts, labels = [], []
    for _ in range(n):
        j = rng.randrange(len(names))
        words = rng.sample(topics[names[j]].split(), 2) + rng.sample(FILLER, 3)
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(j)
    return texts, labels


def _synonym_encoder(train_texts: list[str]) -> StaticEncoder:
    """A table where a word and its synonym share one vector (what a good teacher gives), filler words noise."""
    words = sorted({w for t in (*SEEN.values(), *UNSEEN.values()) for w in t.split()} | set(FILLER))
    tok = word_tokenizer(words)
    rng = np.random.default_rng(0)
    table = np.zeros((tok.get_vocab_size(), 16), np.float32)
    for topic in SEEN:
        direction = rng.normal(size=16)
        for seen, unseen in zip(SEEN[topic].split(), UNSEEN[topic].split()):
            table[tok.token_to_id(seen)] = table[tok.token_to_id(unseen)] = direction + 0.3 * rng.normal(size=16)
    for w in FILLER:
        table[tok.token_to_id(w)] = 0.5 * rng.normal(size=16)
    weights, idf = token_statistics(tok, train_texts, sif=1e-2)
    config = StaticEncoderConfig(dim=16, vocab_size=tok.get_vocab_size(), alpha=1.0)
    return StaticEncoder(tok, table, weights, idf, config)


def test_the_static_block_finds_labels_through_synonyms_tfidf_never_saw():
    train_texts, train_labels = _texts(SEEN, 240, seed=1)
    test_texts, test_labels = _texts(UNSEEN, 60, seed=2)
    Y = sp.csr_matrix((np.ones(len(train_labels)), (np.arange(len(train_labels)), train_labels)), shape=(240, 6))
    tfidf, X = TfidfFeaturizer.fit(train_texts, TfidfConfig(min_df=1))
    config = XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=2))
    static = _synonym_encoder(train_texts)

    def p_at_1(model, features) -> float:
        return float(np.mean(model.predict(features, k=1).labels[:, 0] == np.asarray(test_labels)))

    plain = train_xlinear(X, Y, config, progress=False)
    trained = train_xlinear(concat_features(X, static.encode(train_texts), 1.0), Y, config, progress=False)
    dense = trained.config.model_copy(update={"dense_features": static.dim})
    with_static = XLinearModel(trained.chain, trained.levels, dense)
    served = ConcatFeaturizer(tfidf, static, alpha=1.0).transform(test_texts)
    assert p_at_1(plain, tfidf.transform(test_texts)) < 0.4  # only filler words are known to TF-IDF
    assert p_at_1(with_static, served) > 0.9


def test_the_ridge_fit_solves_its_normal_equations_and_leaves_unused_tokens_alone():
    rng = np.random.default_rng(0)
    A = sp.random(40, 12, density=0.3, random_state=1, format="lil")
    A[:, 11] = 0  # a token no text uses
    A = A.tocsr()
    A.eliminate_zeros()
    E, T0 = rng.normal(size=(40, 5)), rng.normal(size=(12, 5))
    table, facts = ridge_fit(A, E, T0, ridge=0.5, max_iter=500, tol=1e-10)
    seen = np.flatnonzero(np.asarray(abs(A).sum(axis=0)).ravel())
    As = A[:, seen].toarray()
    lam = facts["lambda"]
    assert lam == pytest.approx(0.5 * float((As**2).sum(axis=0).mean()))
    exact = np.linalg.solve(As.T @ As + lam * np.eye(len(seen)), As.T @ E + lam * T0[seen])
    np.testing.assert_allclose(table[seen], exact, atol=1e-4)
    np.testing.assert_array_equal(table[11], T0[11].astype(np.float32))
    looser, _ = ridge_fit(A, E, T0, ridge=50.0, max_iter=500, tol=1e-10)
    assert np.linalg.norm(looser - T0) < np.linalg.norm(table - T0)  # a larger ridge stays nearer the start


def _dense(tiny_bert, **settings):
    from xtag.training.static.config import StaticDenseConfig

    return StaticDenseConfig(source=tiny_bert, dim=16, batch_size=64, **settings)


def test_distillation_pools_every_token_between_the_special_tokens(tiny_bert, corpus_files):
    import torch
    from xtag.training.static.fit import build_static_encoder
    from xtag.training.static.teacher import Teacher

    teacher = Teacher.load(tiny_bert)
    vectors = teacher.token_vectors(batch_size=7)  # batches that do not divide the vocabulary
    cls_id, sep_id = teacher.tokenizer.token_to_id("[CLS]"), teacher.tokenizer.token_to_id("[SEP]")
    with torch.inference_mode():
        for token in (0, 5, 123, teacher.tokenizer.get_vocab_size() - 1):
            ids = torch.tensor([[cls_id, token, sep_id]])
            np.testing.assert_allclose(vectors[token], teacher.encoder(ids, torch.ones_like(ids))[0], atol=1e-5)
    texts = [json.loads(line)["text"] for line in corpus_files[0].read_text().splitlines()]
    events = []
    encoder = build_static_encoder(texts, _dense(tiny_bert), events.append)
    assert encoder.table.shape == (teacher.tokenizer.get_vocab_size(), 16)
    assert abs(encoder.table.mean(axis=0)).max() < 1e-2  # PCA centres the table
    assert encoder.weights[cls_id] == encoder.weights[teacher.tokenizer.token_to_id("[PAD]")] == 0
    seen = teacher.tokenizer.token_to_id("shooter")
    assert 0 < encoder.weights[seen] < 1 and encoder.weights[vectors.shape[0] - 1] <= 1
    assert [e["event"] for e in events] == ["static_distill"] and events[0]["dim"] == 16


def test_a_dim_above_the_teachers_width_is_refused(tiny_bert):
    from xtag.models.errors import XtagError
    from xtag.training.static.fit import build_static_encoder

    with pytest.raises(XtagError, match="hidden size 32"):
        build_static_encoder(["some text"], _dense(tiny_bert).model_copy(update={"dim": 64}))


def test_dense_is_refused_by_families_without_the_capability(tiny_bert, corpus_files):
    from pydantic import ValidationError
    from xtag.training.config import TrainConfig

    TrainConfig(corpus=corpus_files[0], dense=_dense(tiny_bert))  # xlinear takes it
    with pytest.raises(
        ValidationError, match="lightxml does not support a static token-embedding block.*supported by xlinear"
    ):
        TrainConfig(corpus=corpus_files[0], model="lightxml", dense=_dense(tiny_bert))


@pytest.fixture(scope="module")
def static_run(tiny_bert, corpus_files, tmp_path_factory):
    from xtag.training.config import TrainConfig

    from tests.conftest import train_and_export

    config = TrainConfig(
        corpus=corpus_files[0],
        tfidf=TfidfConfig(min_df=1),
        xlinear=XLinearConfig(n_jobs=1, tree=TreeConfig(branching=2, max_leaf_size=4)),
        dense=_dense(tiny_bert, tune="corpus", alpha=0.7, teacher_max_length=32, tune_texts=300),
    )
    return train_and_export(config, tmp_path_factory.mktemp("static"))


def test_the_bundle_serves_the_features_training_used(static_run, corpus_files):
    from xtag.models.bundle.loader import load_bundle

    run, bundle = static_run
    texts = [json.loads(line)["text"] for line in corpus_files[0].read_text().splitlines()][:50]
    config = json.loads((run / "config.json").read_text())
    _, X = TfidfFeaturizer.fit(
        [json.loads(line)["text"] for line in corpus_files[0].read_text().splitlines()],
        TfidfConfig(**config["tfidf"]),
    )
    static = StaticEncoder.load(run / "checkpoints" / "static")  # what training encoded its texts with
    trained = concat_features(X[:50], static.encode(texts), 0.7)
    loaded = load_bundle(bundle)
    served = loaded.predictor.featurizer.transform(texts).tocsr()
    assert served.shape == trained.shape == (50, X.shape[1] + 16)
    np.testing.assert_allclose(served.toarray(), trained.toarray(), atol=1e-6)
    assert np.linalg.norm(served[:, X.shape[1] :].toarray(), axis=1) == pytest.approx(0.7)  # α, both sides
    manifest = loaded.manifest
    assert {"type": "static-encoder", "path": "features/static"} in manifest["components"]
    for name in ("table.npy", "weights.npy", "idf.npy", "tokenizer.json", "config.json"):
        assert f"features/static/{name}" in manifest["files"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["dense_features"] == 16 and summary["features"] == X.shape[1] + 16
    log = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    (tune,) = [e for e in log if e["event"] == "static_tune"]
    assert tune["texts"] == 300 and tune["tokens_fitted"] > 0 and tune["residual"] < 1
    assert "static_distill" in {e["event"] for e in log}


def test_the_static_bundle_serves_without_torch(static_run):
    assert_serves_without_torch(static_run[1], ["shooter arena frag", "python pip module", "genome protein dna"])


def test_a_resumed_run_reuses_the_saved_static_encoder(static_run):
    from xtag.training.static.config import StaticDenseConfig
    from xtag.training.static.fit import static_encoder_for_run

    saved = static_run[0] / "checkpoints" / "static"
    events = []
    # no teacher at all: only the saved encoder can answer
    again = static_encoder_for_run(["x"], StaticDenseConfig(source=None), saved, events.append)
    assert events == [{"event": "resume", "what": "static encoder"}]
    np.testing.assert_array_equal(again.table, StaticEncoder.load(saved).table)


def test_corpus_tuning_brings_the_static_mean_closer_to_the_teachers_output(tiny_bert, corpus_files):
    from xtag.training.static.distill import reduce
    from xtag.training.static.fit import build_static_encoder
    from xtag.training.static.teacher import Teacher

    texts = [json.loads(line)["text"] for line in corpus_files[0].read_text().splitlines()]
    teacher = Teacher.load(tiny_bert)
    pca = reduce(teacher.token_vectors(64), 16)  # the same PCA the builder fits (deterministic)
    target = pca.transform(teacher.text_vectors(texts, 32, 64))
    target /= np.linalg.norm(target, axis=1, keepdims=True)

    def agreement(tune: str) -> float:
        encoder = build_static_encoder(texts, _dense(tiny_bert, tune=tune, teacher_max_length=32))
        return float(np.mean(np.sum(encoder.encode(texts) * target, axis=1)))

    distilled, tuned = agreement("none"), agreement("corpus")
    assert tuned > distilled + 0.1 and tuned > 0.8
