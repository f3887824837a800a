"""LaMP's epoch chosen on held-out texts (lamp.val_fraction): the best epoch's weights are the ones kept."""

import json

import numpy as np
import torch
from torch import nn

from tests.conftest import lamp_config, train_and_export


def test_epoch_selection_keeps_the_weights_of_the_best_epoch():
    from xtag.training.lamp.selection import EpochSelection

    module, scores, events = nn.Linear(2, 1), iter([0.5, 0.7, 0.7, 0.6]), []
    selection = EpochSelection(module, lambda: next(scores), events.append)
    for epoch in range(4):
        with torch.no_grad():
            module.weight.fill_(float(epoch))  # each epoch's weights, recognisable
        selection.select(epoch)
    assert selection.finish() == {"epoch": 2, "P@1": 70.0}  # the tie at epoch 3 keeps the earlier epoch
    assert module.weight.tolist() == [[1.0, 1.0]]
    assert [e["best"] for e in events] == [True, True, False, False]


def test_held_out_p_at_1_never_picks_padding():
    from xtag.training.lamp.selection import p_at_1

    logits = torch.tensor([[0.1, 0.9, 5.0], [2.0, 0.3, 0.0]])
    y = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    valid = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # row 0's third candidate is padding
    assert p_at_1(logits, y, valid) == 0.5


def test_val_fraction_holds_texts_out_and_validates_each_epoch(corpus_files, tiny_bundle, tiny_bert, tmp_path):
    """The held-out texts do not train; every epoch is validated and the kept one is the best validated."""
    config = lamp_config(
        corpus_files[0], tiny_bundle, tiny_bert, heads=2, dim=16, encoder_layers=0, epochs=3, val_fraction=0.25
    )
    run, bundle = train_and_export(config, tmp_path)
    events = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    checks = [e for e in events if e["event"] == "lamp_validate"]
    assert [e["epoch"] for e in checks] == [1, 2, 3]
    done = next(e for e in events if e["event"] == "lamp_done")
    best = max(checks, key=lambda e: (e["P@1"], -e["epoch"]))
    assert done["selected"] == {"epoch": best["epoch"], "P@1": best["P@1"]}
    assert done["train_documents"] == 300  # the fixture's 400 texts, a quarter held out
    assert (bundle / "manifest.json").exists()


def test_held_out_rows_are_a_seeded_share_of_the_corpus():
    from xtag.training.lamp.selection import held_out_rows

    held = held_out_rows(40, 0.25, seed=3)
    assert len(np.unique(held)) == 10 and held.min() >= 0 and held.max() < 40
    assert held.tolist() == held_out_rows(40, 0.25, seed=3).tolist()  # seeded: a resumed run holds out the same
    assert held.tolist() != held_out_rows(40, 0.25, seed=4).tolist()
    assert len(held_out_rows(40, 0.0, seed=3)) == 0
