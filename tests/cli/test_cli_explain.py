"""`xtag predict --explain`: each label followed by the words that raised its score, and the service's object in JSON lines."""

import json

from typer.testing import CliRunner
from xtag.models.bundle.loader import load_bundle
from xtag.models.explain.linear import Explainer

from tests.conftest import make_rows, write_jsonl
from xtag.cli import app

runner = CliRunner()
TEXT = "compiler gcc pointer header for genome protein"


def test_predict_explain_prints_each_labels_words_under_it(tiny_bundle):
    plain = runner.invoke(app, ["predict", str(tiny_bundle), TEXT, "--k", "3"])
    r = runner.invoke(app, ["predict", str(tiny_bundle), TEXT, "--k", "3", "--explain"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0::2] == plain.output.splitlines()  # the plain lines, unchanged, each followed by its words
    words = [line.split("words: ", 1)[1].split(" · margins ")[0] for line in lines[1::2]]
    assert len(words) == 3
    for shown in words:
        terms = [item.rsplit(" ", 1)[0] for item in shown.split(", ")]
        assert terms and all(term in TEXT for term in terms), shown


def test_predict_explain_writes_the_explanation_objects_in_json_lines(tiny_bundle, tmp_path):
    rows = make_rows(4, seed=9)
    corpus, out = write_jsonl(tmp_path / "t.jsonl", rows), tmp_path / "p.jsonl"
    args = ["predict", str(tiny_bundle), "--corpus", str(corpus), "--k", "2", "--no-progress", "--out", str(out)]
    assert runner.invoke(app, [*args, "--explain"]).exit_code == 0
    explained = [json.loads(line) for line in out.read_text().splitlines()]
    assert runner.invoke(app, args).exit_code == 0
    plain = [json.loads(line) for line in out.read_text().splitlines()]
    predictor = load_bundle(tiny_bundle).predictor
    ids = {name: i for i, name in enumerate(predictor.vocab.names)}
    expected = Explainer.for_predictor(predictor).explain(
        [r["text"] for r in rows], [[ids[label["name"]] for label in p["labels"]] for p in plain]
    )
    for e, p, want in zip(explained, plain, expected):
        assert [{k: v for k, v in label.items() if k != "explanation"} for label in e["labels"]] == p["labels"]
        assert [label["explanation"] for label in e["labels"]] == want


def test_predict_explain_on_a_bundle_without_tfidf_is_a_one_line_error(lightxml_bundle):
    _, bundle = lightxml_bundle
    r = runner.invoke(app, ["predict", str(bundle), TEXT, "--explain"])
    assert r.exit_code != 0
    assert "no TF-IDF features" in r.output and "Traceback" not in r.output


def test_predict_explain_on_a_lamp_bundle_prints_attended_words_and_supporting_labels(lamp_bundle):
    text = "shooter weapons arena frag multiplayer"
    plain = runner.invoke(app, ["predict", str(lamp_bundle[1]), text, "--k", "3"])
    r = runner.invoke(app, ["predict", str(lamp_bundle[1]), text, "--k", "3", "--explain"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0::2] == plain.output.splitlines()
    names = {line.split("  ", 1)[1] for line in lines[0::2]}
    for line, label in zip(lines[1::2], lines[0::2]):
        words, attended, support = line.strip().split(" · ")[0], *line.split(" · attended: ")[1].split(" · with: ")
        assert words.startswith("words: ")  # the first stage's, as for its own bundle
        assert attended != "(none)" and {a.rsplit(" ", 1)[0] for a in attended.split(", ")} <= set(text.split())
        shown = {s.rsplit(" ", 1)[0] for s in support.split(", ")} - {"(none)"}
        assert shown <= names - {label.split("  ", 1)[1]}
