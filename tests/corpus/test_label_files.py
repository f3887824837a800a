"""Label files in each format users have (xtag JSONL, Annif TSV, SKOS Turtle and RDF/XML), and each bad input
named by FILE:LINE or the concept's URI."""

import gzip
import json

import pytest
from xtag.corpus.files import load_corpus
from xtag.corpus.label_files import label_file_format, missing_note, read_label_file
from xtag.models.errors import XtagError

TURTLE = """\
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix ex: <http://example.org/v/> .

ex:animals a skos:Concept ; skos:prefLabel "animals"@en, "eläimet"@fi .
ex:cats a skos:Concept ;
    skos:prefLabel "Katzen"@de, "cats"@en ;
    skos:altLabel "felines"@en, "Miezen"@de ;
    skos:definition "Small domestic felines."@en ;
    skos:broader ex:animals .
ex:lions a skos:Concept ; skos:prefLabel "lions" ; skos:scopeNote "Big cats only." ; skos:broader ex:cats .
ex:dogs a skos:Concept ; skos:prefLabel "koirat"@fi .
ex:animals skos:narrower ex:dogs .
"""

RDF_XML = """\
<?xml version="1.0" encoding="utf-8"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:skos="http://www.w3.org/2004/02/skos/core#">
  <skos:Concept rdf:about="http://example.org/v/animals">
    <skos:prefLabel xml:lang="en">animals</skos:prefLabel>
  </skos:Concept>
  <skos:Concept rdf:about="http://example.org/v/cats">
    <skos:prefLabel xml:lang="en">cats</skos:prefLabel>
    <skos:altLabel xml:lang="en">felines</skos:altLabel>
    <skos:broader rdf:resource="http://example.org/v/animals"/>
  </skos:Concept>
</rdf:RDF>
"""
EX = "http://example.org/v/"


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_and_gz(tmp_path):
    rows = [{"id": "a", "name": "A", "alt_labels": ["alpha"]}, {"id": "b", "description": "bee", "broader": ["a"]}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    for path in (write(tmp_path / "labels.jsonl", text), tmp_path / "labels.jsonl.gz"):
        if path.suffix == ".gz":
            with gzip.open(path, "wt") as fh:
                fh.write(text)
        texts = read_label_file(path)
        assert [t.id for t in texts.labels] == ["a", "b"]
        assert texts.get("b").broader == ("a",) and texts.branch(["a"]) == {"a", "b"}


@pytest.mark.parametrize(
    "rows, why",
    [
        ('{"id": "a"}\n{"id": "a"}\n', r":2: label 'a' is given twice \(first on line 1\)"),
        ('{"id": "a"}\n{not json\n', r":2: bad JSON"),
        ('{"id": "a", "broader": ["zz"]}\n', r":1: broader 'zz' is not a label of the file"),
        ('{"id": "a"}\n{"id": "b", "colour": "red"}\n', r":2: unknown field 'colour'"),
        ('{"name": "no id"}\n', r':1: "id" must be a non-empty string'),
        ('{"id": "a", "broader": ["b"]}\n{"id": "b", "broader": ["a"]}\n', r"broader labels form a cycle: a → b → a"),
        ("\n", r"names no label"),
    ],
)
def test_bad_jsonl_names_file_line_and_reason(tmp_path, rows, why):
    with pytest.raises(XtagError, match=rf"labels\.jsonl.*{why}"):
        read_label_file(write(tmp_path / "labels.jsonl", rows))


def test_annif_tsv_ids_agree_with_an_annif_corpus(tmp_path):
    vocab = write(tmp_path / "vocab.tsv", f"<{EX}cats>\tcats\t636.8\n\n{EX}dogs\tdogs\n")
    texts = read_label_file(vocab)
    assert [(t.id, t.name) for t in texts.labels] == [(f"{EX}cats", "cats"), (f"{EX}dogs", "dogs")]
    corpus = load_corpus(write(tmp_path / "train.tsv", f"a cat and a dog\t<{EX}cats> <{EX}dogs>\n"))
    assert all(label in texts for label in corpus.labels[0])
    assert missing_note(texts, corpus.labels[0]) is None


@pytest.mark.parametrize(
    "text, why",
    [
        (f"<{EX}a>\tA\n<{EX}b>\n", r":2: expected 2 or 3 tab-separated columns .*found 1"),
        (f"<{EX}a>\tA\tx\ty\n", r":1: expected 2 or 3 tab-separated columns .*found 4"),
        (f"<{EX}a>\tA\n<{EX}a>\tA again\n", rf":2: subject '{EX}a' is given twice \(first on line 1\)"),
        (f"<{EX}a>\t \n", rf":1: subject '{EX}a' has no label"),
        ("<>\tA\n", r":1: '<>' is not a subject URI"),
        ("<a b>\tA\n", r":1: '<a b>' is not a subject URI"),
    ],
)
def test_bad_annif_tsv_names_file_line_and_reason(tmp_path, text, why):
    with pytest.raises(XtagError, match=rf"vocab\.tsv{why}"):
        read_label_file(write(tmp_path / "vocab.tsv", text))


def test_skos_turtle(tmp_path):
    texts = read_label_file(write(tmp_path / "vocab.ttl", TURTLE))
    cats, lions, dogs = texts.get(EX + "cats"), texts.get(EX + "lions"), texts.get(EX + "dogs")
    assert (cats.name, cats.alt_labels, cats.description) == ("cats", ("felines",), "Small domestic felines.")
    assert cats.broader == (EX + "animals",)
    assert (lions.name, lions.description) == ("lions", "Big cats only.")  # language-less; scopeNote as description
    assert (dogs.name, dogs.broader) == ("koirat", (EX + "animals",))  # no English label; broader from narrower
    assert texts.get(EX + "animals").name == "animals"
    assert texts.branch([EX + "cats"]) == {EX + "cats", EX + "lions"}
    assert [t.id for t in texts.labels] == sorted(t.id for t in texts.labels)


def test_skos_rdf_xml_by_suffix_and_by_content(tmp_path):
    for name in ("vocab.rdf", "vocab.skos", "vocabulary"):
        texts = read_label_file(write(tmp_path / name, RDF_XML))
        assert texts.get(EX + "cats").alt_labels == ("felines",)
        assert texts.get(EX + "cats").broader == (EX + "animals",)
    with gzip.open(tmp_path / "vocab.ttl.gz", "wt") as fh:
        fh.write(TURTLE)
    assert len(read_label_file(tmp_path / "vocab.ttl.gz")) == 4


def test_format_by_content(tmp_path):
    assert label_file_format(write(tmp_path / "a", '{"id": "x"}\n')) == "jsonl"
    assert label_file_format(write(tmp_path / "b", "@prefix ex: <http://e/> .\n")) == "skos"
    assert label_file_format(write(tmp_path / "c", "<http://e/x>\tx\n")) == "tsv"
    with pytest.raises(XtagError, match="cannot tell the label file's format"):
        label_file_format(write(tmp_path / "d", "just words\n"))


SKOS_HEAD = "@prefix skos: <http://www.w3.org/2004/02/skos/core#> .\n@prefix ex: <http://example.org/v/> .\n"


@pytest.mark.parametrize(
    "body, why",
    [
        ('ex:a a skos:Concept ;\n skos:prefLabel "a"\nex:b a skos:Concept .\n', r"vocab\.ttl:5: not valid Turtle"),
        ("ex:a a skos:Concept .\n", rf"concept <{EX}a> has no skos:prefLabel"),
        (
            'ex:a a skos:Concept ; skos:prefLabel "a" ; skos:broader ex:zz .\n',
            rf"concept <{EX}a> has broader <{EX}zz>, which is not a skos:Concept of the file",
        ),
        (
            'ex:a a skos:Concept ; skos:prefLabel "a" ; skos:broader ex:b .\n'
            'ex:b a skos:Concept ; skos:prefLabel "b" ; skos:broader ex:a .\n',
            rf"broader labels form a cycle: {EX}a → {EX}b → {EX}a",
        ),
        ('ex:a skos:prefLabel "a" .\n', "no skos:Concept in the file"),
    ],
)
def test_bad_skos_names_the_concept_or_line(tmp_path, body, why):
    with pytest.raises(XtagError, match=why):
        read_label_file(write(tmp_path / "vocab.ttl", SKOS_HEAD + body))


def test_bad_rdf_xml_names_its_line(tmp_path):
    bad = RDF_XML.replace("</skos:Concept>\n</rdf:RDF>", "</skos:Concept>\n</rdf:RDFx>")
    with pytest.raises(XtagError, match=r"vocab\.rdf:11: not valid RDF/XML \(mismatched tag\)"):
        read_label_file(write(tmp_path / "vocab.rdf", bad))


def test_missing_labels_are_one_warning_with_a_count(tmp_path):
    texts = read_label_file(write(tmp_path / "labels.jsonl", '{"id": "a", "name": "A"}\n'))
    note = missing_note(texts, ["a", "b", "c"])
    assert "2 of the corpus's 3 labels are not in the label file ('b', 'c')" in note
