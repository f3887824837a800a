"""The stage's encoder never trains on the documents its fusion is fitted on: those are held out of it, as of the
held-out tree (trained on them, their cosines to their own labels were inflated, and the fusion over-trusted them)."""

from __future__ import annotations

from xtag.training.label_text import stage

from tests.label_text_support import label_file, train_fused  # noqa: F401  (pytest fixtures)


def test_the_encoder_never_sees_a_held_out_document(corpus_files, label_file, tmp_path, monkeypatch):  # noqa: F811
    seen = {}

    def recording_encoder(texts, Y, label_texts, config, **kwargs):
        seen["encoder"] = list(kwargs["doc_ids"])
        assert len(texts) == Y.shape[0] == len(seen["encoder"])
        return real_encoder(texts, Y, label_texts, config, **kwargs)

    def recording_own(doc_ids, names):
        seen["fusion"] = list(doc_ids)
        return real_own(doc_ids, names)

    real_encoder, real_own = stage.train_label_encoder, stage.own_columns
    monkeypatch.setattr(stage, "train_label_encoder", recording_encoder)
    monkeypatch.setattr(stage, "own_columns", recording_own)
    train_fused(corpus_files[0], label_file, tmp_path)

    encoder, fusion = set(seen["encoder"]), set(seen["fusion"])
    assert fusion and not encoder & fusion
    assert encoder | fusion == {f"doc{i}" for i in range(400)}
    assert (tmp_path / "run" / "checkpoints" / "label_text" / "heldout_encoder" / "config.json").is_file()
