"""`xtag update` of a run trained with a label file keeps its label texts: the new run, and its bundle, say what
the old labels say; the new labels read as their ids."""

from xtag.models.bundle.loader import load_bundle
from xtag.models.label_texts import LABEL_TEXTS_FILE
from xtag.training.export.export_run import export_run
from xtag.training.update_run import update_run

from tests.conftest import write_jsonl


def test_update_carries_the_label_texts(tiny_texts_bundle, tmp_path):
    run, _ = tiny_texts_bundle
    new = [
        {"id": f"new{i}", "text": f"quantum qubit entangle photon {i}", "labels": ["sci::quantum"]} for i in range(8)
    ]
    update_run(run, write_jsonl(tmp_path / "new.jsonl", new), tmp_path / "run2", progress=False)
    kept = tmp_path / "run2" / "model" / LABEL_TEXTS_FILE
    assert kept.read_bytes() == (run / "model" / LABEL_TEXTS_FILE).read_bytes()
    export_run(tmp_path / "run2", tmp_path / "bundle2")
    predictor = load_bundle(tmp_path / "bundle2").predictor
    assert "sci::quantum" in predictor.vocab.names and "sci::quantum" not in predictor.label_texts
    assert predictor.label_texts.get("sci::bio").description == "Genomes and proteins."
