import gzip
import json

import pytest
from xtag.corpus.files import build_vocab, load_corpus
from xtag.models.errors import XtagError


def test_jsonl_gz_with_ids_and_line_numbers(tmp_path):
    path = tmp_path / "c.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps({"id": "pkg1", "text": "alpha beta", "labels": ["b", "a"]}) + "\n")
        fh.write("\n")
        fh.write(json.dumps({"text": "gamma", "labels": ["a"]}) + "\n")
    corpus = load_corpus(path)
    assert corpus.ids == ["pkg1", "3"]
    assert corpus.labels == [["b", "a"], ["a"]]


@pytest.mark.parametrize(
    "line, why",
    [
        ("{not json", "bad JSON"),
        ('{"text": "", "labels": ["a"]}', "no text"),
        ('{"text": "x y", "labels": []}', "no labels"),
        ('{"text": "x y", "labels": "a"}', "labels must be a list"),
        ('["text"]', "JSON object"),
    ],
)
def test_malformed_row_names_file_and_line(tmp_path, line, why):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "labels": ["a"]}\n' + line + "\n")
    with pytest.raises(XtagError, match=rf"c\.jsonl:2(:\d+)?: .*{why}"):
        load_corpus(path)


def test_a_json_error_says_file_line_column_and_the_whole_reason(tmp_path):
    """Issue 47: a JSON error was cut short ("bad JSON (Expecting value)", no position). It is FILE:LINE:COLUMN,
    the reader's whole reason, and the text at that place, also in a long row."""
    path = tmp_path / "c.jsonl"
    row = '{"text": "' + "word " * 200 + '", "labels": ["a",, "b"]}'
    path.write_text('{"text": "fine", "labels": ["a"]}\n' + row + "\n")
    column = row.index(",,") + 2
    with pytest.raises(XtagError) as caught:
        load_corpus(path)
    said = str(caught.value)
    assert said.startswith(f"{path}:2:{column}: bad JSON: Expecting value at column {column}, near "), said
    assert '"labels": ["a",, "b"]}' in said and len(said) < 200, said


def test_skip_bad_rows_counts_them(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine", "labels": ["a"]}\n{oops\n{"text": "ok", "labels": ["b"]}\n')
    corpus = load_corpus(path, skip_bad=True)
    assert len(corpus) == 2 and corpus.skipped == 1 and corpus.skipped_lines == [2]


def test_annif_tsv(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("first text\t<http://ex.org/a> <http://ex.org/b>\nsecond\thttp://ex.org/a\n")
    corpus = load_corpus(path)
    assert corpus.labels == [["http://ex.org/a", "http://ex.org/b"], ["http://ex.org/a"]]
    path.write_text("no tab here\n")
    with pytest.raises(XtagError, match=r"c\.tsv:1: expected 2 tab-separated columns"):
        load_corpus(path)


def test_attentionxml_pairs(tmp_path):
    (tmp_path / "train_texts.txt").write_text("one doc\ntwo doc\n")
    (tmp_path / "train_labels.txt").write_text("a b\nc\n")
    corpus = load_corpus(tmp_path / "train_texts.txt")
    assert corpus.texts == ["one doc", "two doc"] and corpus.labels == [["a", "b"], ["c"]]
    (tmp_path / "train_labels.txt").write_text("a b\n")
    with pytest.raises(XtagError, match="2 texts but"):
        load_corpus(tmp_path / "train_texts.txt")


def test_invalid_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "\xff\xfe", "labels": ["a"]}\n')
    with pytest.raises(XtagError, match="not valid UTF-8"):
        load_corpus(path)


def test_vocab_ids_do_not_depend_on_row_order(tmp_path):
    rows = [{"text": "x", "labels": ["zeta", "alpha"]}, {"text": "y", "labels": ["mid", "alpha"]}]
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))
    va, vb = build_vocab(load_corpus(a)), build_vocab(load_corpus(b))
    assert va.names == vb.names == ["alpha", "mid", "zeta"]
    assert va.frequencies == [2, 1, 1]
    Y, unknown = load_corpus(a).label_matrix(va)
    assert Y.toarray().tolist() == [[1, 0, 1], [1, 1, 0]] and unknown == 0


def test_unknown_format_is_refused(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text("x")
    with pytest.raises(XtagError, match="--format"):
        load_corpus(path)
