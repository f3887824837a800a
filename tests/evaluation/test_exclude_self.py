"""`--exclude-self` (xtag evaluate, xtag predict --corpus): a document whose id is a label never gets that label."""

import json

import pytest
from typer.testing import CliRunner
from xtag.corpus.files import Corpus
from xtag.evaluation.evaluate import evaluate_bundle
from xtag.evaluation.report import ReportConfig, build_report
from xtag.models.bundle.loader import load_bundle

from tests.conftest import write_jsonl
from xtag.cli import app

TEXTS = ["shooter weapons arena frag", "genome protein dna", "python script", "plain words"]


@pytest.fixture(scope="module")
def own_ids(tiny_bundle) -> Corpus:
    """Documents whose id is their top label, and whose only true label is that one: P@1 is 100 without the
    exclusion and 0 with it. The last document's id is no label: it is never filtered."""
    predictor = load_bundle(tiny_bundle).predictor
    top = [predictor.vocab.names[j] for j in predictor.predict(TEXTS, k=1).labels[:, 0]]
    return Corpus(ids=[*top[:3], "doc-3"], texts=TEXTS, labels=[[name] for name in top])


def test_evaluate_and_the_report_exclude_each_documents_own_id(tiny_bundle, own_ids):
    bundle = load_bundle(tiny_bundle)
    plain, _ = evaluate_bundle(bundle, own_ids, ks=(1,), progress=False)
    excluded, _ = evaluate_bundle(bundle, own_ids, ks=(1,), progress=False, exclude_self=True)
    assert plain["P@1"] == 100.0 and excluded["P@1"] == 25.0  # only "doc-3" keeps its top label
    report = build_report(bundle, own_ids, ReportConfig(ks=(1,), report_k=1, exclude_self=True), progress=False)
    assert report.metrics["P@1"] == 25.0 and report.info["excluded_self"] == 3


def test_the_cli_flags(tiny_bundle, own_ids, tmp_path):
    rows = [{"id": i, "text": t, "labels": y} for i, t, y in zip(own_ids.ids, own_ids.texts, own_ids.labels)]
    corpus = write_jsonl(tmp_path / "own.jsonl", rows)
    runner = CliRunner()
    r = runner.invoke(app, ["evaluate", str(tiny_bundle), "--corpus", str(corpus), "--ks", "1", "--exclude-self"])
    assert r.exit_code == 0, r.output
    assert "3 documents never got their own id" in r.output
    out = tmp_path / "tags.jsonl"
    args = ["predict", str(tiny_bundle), "--corpus", str(corpus), "--k", "2", "--out", str(out), "--no-progress"]
    assert runner.invoke(app, [*args, "--exclude-self"]).exit_code == 0
    tagged = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(row["id"] not in [label["name"] for label in row["labels"]] for row in tagged)
    assert [len(row["labels"]) for row in tagged] == [2, 2, 2, 2]
    refused = runner.invoke(app, ["predict", str(tiny_bundle), "python script", "--exclude-self"])
    assert refused.exit_code == 2 and "--exclude-self needs" in refused.output
