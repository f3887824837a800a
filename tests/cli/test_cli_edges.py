"""CLI rough edges (issue 14): predict's reweighting flags, --print-config without a corpus, the train
extra named before anything slow, an honest encoding progress bar, and a talkative transformer export."""

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from xtag.cli import app

runner = CliRunner()
TEXTS = ["email smtp imap inbox mailbox", "obscure rare niche tailtopic oddity audio", "python module pip script"]


def _labels(output: str) -> list[list[tuple[str, float]]]:
    return [[(x["name"], x["score"]) for x in json.loads(line)["labels"]] for line in output.splitlines()]


def test_predict_reweight_runs_the_services_reranking(tiny_bundle, tmp_path):
    from xtag.models.bundle.loader import load_bundle
    from xtag.models.inference.reweighting import gains_for, label_weights, predict_reweighted

    corpus = tmp_path / "texts.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    base = ["predict", str(tiny_bundle), "--corpus", str(corpus), "--k", "3", "--no-progress"]
    r = runner.invoke(app, base + ["--reweight", "psp", "--alpha", "1"])
    assert r.exit_code == 0, r.output
    p = load_bundle(tiny_bundle).predictor
    a = gains_for(label_weights(p.vocab.frequency_array, p.vocab.n_train_docs, "psp"), 1.0)
    expected = predict_reweighted(p, TEXTS, 3, a, int(p.model.config.beam_size), p.n_labels)
    assert _labels(r.output) == [[(n, round(s, 6)) for _, n, s in row] for row in p.named(expected)]
    plain = runner.invoke(app, base)
    assert _labels(plain.output) != _labels(r.output)  # the tail label moves up for the second text
    assert runner.invoke(app, base + ["--reweight", "psp", "--alpha", "0"]).output == plain.output
    r = runner.invoke(app, base + ["--reweight", "power", "--alpha", "0.5", "--beta", "1"])
    assert r.exit_code == 0, r.output


def test_predict_threshold_and_flag_errors(tiny_bundle):
    base = ["predict", str(tiny_bundle), TEXTS[0], "--k", "5"]
    full = runner.invoke(app, base)
    scores = [float(line.split()[0]) for line in full.output.splitlines()]
    assert len(scores) == 5 and scores[1] < scores[0]
    cut = runner.invoke(app, base + ["--threshold", str((scores[0] + scores[1]) / 2)])
    assert [float(line.split()[0]) for line in cut.output.splitlines()] == scores[:1]
    assert runner.invoke(app, base + ["--threshold", "0"]).output == full.output
    for flags, message in (
        (["--alpha", "0.5"], "need --reweight"),
        (["--reweight", "psp"], "needs --alpha"),
        (["--reweight", "psp", "--alpha", "0.5", "--beta", "1"], "only applies to the 'power' scheme"),
        (["--reweight", "idf", "--alpha", "0.5"], "unknown reweighting scheme"),
    ):
        r = runner.invoke(app, base + flags)
        assert r.exit_code == 2 and message in r.output, r.output


def test_print_config_needs_no_corpus(tmp_path):
    r = runner.invoke(app, ["train", "--print-config", "--model", "lightxml"])
    assert r.exit_code == 0, r.output
    config = json.loads(r.output)
    assert config["corpus"] is None and config["model"] == "lightxml" and "lightxml" in config
    path = tmp_path / "c.json"
    path.write_text(r.output)
    r = runner.invoke(app, ["train", "--config", str(path), "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "--corpus is required" in r.output


@pytest.mark.parametrize("kind", ["xr-transformer", "lightxml"])
def test_missing_train_extra_fails_before_reading_the_corpus(kind, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec reports it missing, as without the extra
    missing = tmp_path / "no-such-corpus.jsonl"
    r = runner.invoke(app, ["train", "--corpus", str(missing), "--model", kind, "--out", str(tmp_path / "run")])
    assert r.exit_code == 2
    assert 'pip install "xtag[train]"' in r.output and "no such corpus" not in r.output
    assert not (tmp_path / "run").exists()


def test_encoding_progress_counts_tokens(monkeypatch):
    import torch
    import xtag.training.deep.encoder as encoder

    class Tokenizer:
        def lengths(self, texts):
            return np.array([len(t.split()) for t in texts], dtype=np.int64)

        def __call__(self, texts):
            width = max(len(t.split()) for t in texts)
            mask = np.array([[1] * len(t.split()) + [0] * (width - len(t.split())) for t in texts])
            return mask.copy(), mask

    class Bar:
        def __init__(self, total=None, **kwargs):
            self.total, self.unit, self.updates = total, kwargs.get("unit"), []
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            self.updates.append(n)

    bars: list[Bar] = []
    monkeypatch.setattr(encoder, "tqdm", Bar)
    texts = ["a " * n for n in (3, 40, 1, 7, 12)]
    module = torch.nn.Module()
    module.forward = lambda ids, mask: mask.float().sum(dim=1, keepdim=True)
    (out,) = encoder.run_batched(module, Tokenizer(), texts, 2, torch.device("cpu"), progress=True)
    assert out[:, 0].tolist() == [3, 40, 1, 7, 12]
    (bar,) = bars
    assert bar.unit == "tok" and bar.total == 63 and bar.updates == [52, 10, 1]  # longest batch first


def test_transformer_export_says_what_it_does_and_hides_torchvision_noise(xr_bundle, tmp_path):
    run, _ = xr_bundle
    r = runner.invoke(app, ["export", str(run), "--out", str(tmp_path / "bundle")])
    assert r.exit_code == 0, r.output
    for step in ("export: ONNX export", "export: parity check", "export: FAISS shortlist index", "done in"):
        assert step in r.output, r.output
    assert "torchvision" not in r.output
