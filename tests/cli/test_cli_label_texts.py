"""Label files from the command line: `xtag train --labels` with a SKOS vocabulary over an Annif TSV corpus (the ids
agree), and `xtag predict --label-text`."""

import json

from typer.testing import CliRunner
from xtag.models.bundle.loader import load_bundle

from tests.conftest import TOPICS, make_rows, write_jsonl
from xtag.cli import app

runner = CliRunner()
EX = "http://example.org/topics/"


URI = {name: EX + name.replace("::", "-") for name in TOPICS}


def trained_over_skos(tmp_path, concepts: list[str], seed: int):
    """An Annif TSV corpus labelled by URI and a SKOS vocabulary of `concepts` (Turtle), trained (`--labels`) and
    exported: (the train command's output, the bundle)."""
    corpus = tmp_path / "train.tsv"
    rows = make_rows(200, seed=seed)
    corpus.write_text("".join(r["text"] + "\t" + " ".join(f"<{URI[n]}>" for n in r["labels"]) + "\n" for r in rows))
    vocab = tmp_path / "vocab.ttl"
    vocab.write_text("@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n" + "\n".join(concepts) + "\n")
    run, bundle = tmp_path / "run", tmp_path / "bundle"
    args = ["train", "--corpus", str(corpus), "--labels", str(vocab), "--out", str(run), "--max-leaf-size", "4"]
    r = runner.invoke(app, [*args, "--threads", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["export", str(run), "--out", str(bundle)]).exit_code == 0
    return r.output, bundle


def test_train_with_a_skos_vocabulary_over_an_annif_corpus(tmp_path):
    uri = URI
    concepts = [f'<{EX}root> a skos:Concept ; skos:prefLabel "Topics"@en .']
    concepts += [
        f'<{u}> a skos:Concept ; skos:prefLabel "{name}"@en ; skos:altLabel "{TOPICS[name].split()[0]}"@en ; '
        f"skos:broader <{EX}root> ."
        for name, u in uri.items()
    ]
    output, bundle = trained_over_skos(tmp_path, concepts, seed=3)
    assert "not in the label file" not in output  # the vocabulary names every label of the corpus
    texts = load_bundle(bundle).predictor.label_texts
    assert texts.get(uri["game::fps"]).alt_labels == ("shooter",)
    assert texts.branch([EX + "root"]) == {EX + "root", *uri.values()}
    r = runner.invoke(app, ["predict", str(bundle), "shooter weapons arena frag", "--k", "1", "--label-text"])
    assert r.exit_code == 0, r.output
    assert f"{uri['game::fps']}  —  game::fps" in r.output


def test_predict_label_text_in_json_lines_and_on_the_text_line(tiny_texts_bundle, tmp_path):
    bundle = tiny_texts_bundle[1]
    r = runner.invoke(app, ["predict", str(bundle), "puzzle tiles solve logic", "--k", "1", "--label-text"])
    assert r.exit_code == 0, r.output
    assert 'game::puzzle  —  Puzzles: Tiles & logic, "quoted".' in r.output
    corpus, out = write_jsonl(tmp_path / "docs.jsonl", make_rows(5, seed=4)), tmp_path / "out.jsonl"
    args = ["predict", str(bundle), "--corpus", str(corpus), "--k", "3", "--no-progress", "--out", str(out)]
    assert runner.invoke(app, [*args, "--label-text"]).exit_code == 0
    shown = [json.loads(line) for line in out.read_text().splitlines()]
    assert runner.invoke(app, args).exit_code == 0
    plain = [json.loads(line) for line in out.read_text().splitlines()]
    for a, b in zip(shown, plain):
        assert [{k: v for k, v in x.items() if k not in ("label", "description")} for x in a["labels"]] == b["labels"]
        assert all(set(x) == {"name", "score"} for x in b["labels"])
        assert all(x["label"] and "description" in x for x in a["labels"])


def test_a_skos_vocabulary_trains_serves_and_filters_a_branch(tmp_path):
    """Issue 49's SKOS must-show: a vocabulary with alt labels and a broader tree (root → facet → topic) over an
    Annif TSV corpus trains with the label-text stage, serves, and a facet excludes or includes its whole branch."""
    from fastapi.testclient import TestClient
    from xtag.config.settings import Settings
    from xtag.service.app import create_app

    from tests.service.svc_support import wait_ready

    uri = URI
    facets = sorted({name.split("::")[0] for name in TOPICS})
    concepts = [f'<{EX}root> a skos:Concept ; skos:prefLabel "Topics"@en .']
    concepts += [
        f'<{EX}{f}> a skos:Concept ; skos:prefLabel "{f} packages"@en ; skos:broader <{EX}root> .' for f in facets
    ]
    concepts += [
        f'<{u}> a skos:Concept ; skos:prefLabel "{name}"@en ; skos:altLabel "{TOPICS[name].split()[0]}"@en ; '
        f'skos:definition "{TOPICS[name]}"@en ; skos:broader <{EX}{name.split("::")[0]}> .'
        for name, u in uri.items()
    ]
    _, bundle = trained_over_skos(tmp_path, concepts, seed=5)

    game = {u for name, u in uri.items() if name.startswith("game::")} | {EX + "game"}
    text = "shooter weapons arena frag puzzle tiles solve logic"
    with TestClient(create_app(Settings(_env_file=None, bundle=bundle))) as client:
        wait_ready(client)
        plain = client.post("/v1/predict", json={"text": text, "k": 4}).json()["labels"]
        assert {label["name"] for label in plain} & game  # the text is about games
        out = client.post("/v1/predict", json={"text": text, "k": 4, "exclude": [EX + "game"]})
        assert out.status_code == 200, out.text
        assert not {label["name"] for label in out.json()["labels"]} & game  # the facet took its branch with it
        only = client.post("/v1/predict", json={"text": text, "k": 20, "include": [EX + "game"], "label_text": True})
        shown = only.json()["labels"]
        assert shown and {label["name"] for label in shown} <= game
        assert all("label" in label for label in shown)  # the vocabulary's prefLabel
        unknown = client.post("/v1/predict", json={"text": text, "exclude": [EX + "nope"]})
        assert unknown.status_code == 422 and EX + "nope" in unknown.text
