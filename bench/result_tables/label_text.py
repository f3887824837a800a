"""The label-text encoder (issue 49): retrieval of labels by their text alone, one row per encoder kind."""

from __future__ import annotations

from .common import bold_column_maxima, f1, f2, ms, one_result_each, table

COLUMNS = ("P@1", "P@5", "R@10", "R@100", "test_only_R@10", "test_only_R@100", "test_only_text_R@10")
HEADER = ("P@1", "P@5", "R@10", "R@100", "new R@10", "new R@100", "new w/ text R@10")


def _name(name: str) -> str:
    """`tfidf-linear:shared=true` → `tfidf-linear (shared=true)`."""
    kind, _, extra = name.partition(":")
    return f"{kind} ({extra.replace(',', ', ')})" if extra else kind


@one_result_each
def label_encoders(r: dict) -> dict[str, str]:
    """bench/label_encoders.py: each kind ranks every label of the label file for each test document."""
    rows = []
    for name, row in r["rows"].items():
        epochs = row.get("epochs", [])
        rows.append(
            [
                _name(name),
                *(f2(row[c]) for c in COLUMNS),
                f1(row["train_seconds"]),
                f1(sum(e["seconds"] for e in epochs)) if epochs else "",
                f1(row["encode_labels_seconds"]),
                ms(row["doc_p50_ms"]),
                f"{row['load_average'][0]:.0f}-{row['load_average'][1]:.0f}",
            ]
        )
    bold_column_maxima(rows, range(1, 1 + len(COLUMNS)))
    header = ["encoder", *HEADER, "train s", "of it epochs s", "encode labels s", "doc p50 ms", "load"]
    hard = r.get("hard_negatives") or {}
    note = (
        f"\n\n{r['test_documents']:,} {r['data']} test documents rank all {r['labels']:,} labels of the label file by "
        f"cosine, each document's own id excluded ({r['test_documents_that_are_labels']:,} are labels); trained on "
        f"{r['train_documents']:,} documents and the texts of their {r['train_labels']:,} labels. P@k and R@k over every "
        "test label; new: the occurrences of labels no training document carries "
        f"({r['rows'][next(iter(r['rows']))]['test_only_occurrences']:,}; w/ text: the "
        f"{r['rows'][next(iter(r['rows']))]['test_only_with_text']:,} whose label has a description). train s: "
        "features, distillation (static) and epochs; doc p50: one test text through the document side in-process."
    )
    if hard:
        note += (
            f" Tree negatives: XR-Linear trained on the training file ({hard['tree_train_seconds']:.0f} s, not in "
            f"train s), its top {hard['m']} for each training document."
        )
    return {"table": table(header, "l" + "r" * (len(header) - 1), rows) + note}
