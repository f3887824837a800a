"""`xtag update RUN --corpus NEW --out RUN2`: a new run from an old one plus new documents, without a full retrain.

The new documents (a feedback export, or any corpus) join the run's training corpus: a row whose id the
old corpus has replaces that row (a corrected document), the others are appended. Label names the run
has never seen become new labels, numbered after the old ones, so every old label keeps its id. The
run's TF-IDF is kept as fitted: words the old corpus never had are not features (refitting it would
change every feature and so every ranker); the run's own rows are not featurised again where the run kept
them (kept_tfidf.py). The family's `update` entry grows the tree and retrains what
changed. RUN2 is a normal run (config.json, model/, summary.json, its combined corpus), so `xtag export`
takes it and a later `xtag update` can build on it, and it keeps the run's label texts (model/label_texts.jsonl); summary.json's `update` section says which labels
are new, which `xtag evaluate` reports apart. It is written in a temporary folder beside RUN2 and
renamed at the end: a killed update leaves RUN untouched and no RUN2 (as save_model does for model/).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from xtag.corpus.files import Corpus, label_counts, load_corpus, write_jsonl_gz
from xtag.models.errors import XtagError, reading
from xtag.models.families import UpdateInputs, UpdatePlacement, family
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.files.atomic import fsync_dir, write_text_atomic
from xtag.models.label_text.loaders import LOADERS as LABEL_TEXT
from xtag.models.label_texts import LABEL_TEXTS_FILE, LabelTexts
from xtag.models.labels import LabelVocab
from xtag.training.config import TrainConfig
from xtag.training.data.fingerprint import CorpusFingerprint
from xtag.training.kept_tfidf import combined_rows, load_rows, same_texts, save_rows
from xtag.training.run import RunLog, save_model

CORPUS_FILE = "corpus.jsonl.gz"  # the combined corpus, inside the new run


def merge_corpora(old: Corpus, new: Corpus) -> Corpus:
    """The old corpus with rows replaced by the new ones of the same id, then the new ids appended."""
    position = {doc_id: i for i, doc_id in enumerate(old.ids)}
    ids, texts, labels = list(old.ids), list(old.texts), list(old.labels)
    for doc_id, text, names in zip(new.ids, new.texts, new.labels):
        i = position.get(doc_id)
        if i is None:
            position[doc_id] = len(ids)
            ids.append(doc_id)
            texts.append(text)
            labels.append(names)
        else:
            texts[i], labels[i] = text, names
    return Corpus(ids=ids, texts=texts, labels=labels, source=f"{old.source} + {new.source}")


def grown_vocab(old: LabelVocab, corpus: Corpus) -> LabelVocab:
    """The old labels in their order, then the corpus's unseen names in order of first mention; frequencies recounted."""
    names = list(old.names)
    known = set(names)
    for row in corpus.labels:
        for name in row:
            if name not in known:
                known.add(name)
                names.append(name)
    counts = label_counts(corpus)
    return LabelVocab(names, [counts.get(n, 0) for n in names], len(corpus))


class _SavedFeatures:
    """The run's TF-IDF as saved, for save_model: copied into the new run rather than serialised again (its
    vocabulary is the slow part, seconds of an update on debtags)."""

    def __init__(self, folder: Path):
        self.folder = folder

    def save(self, folder: Path) -> None:
        shutil.copytree(self.folder, folder)


def _kept_texts(run: Path) -> LabelTexts | None:
    """The run's label texts (a run trained with --labels), carried into the new run as they are: its new labels
    read as their ids until a label file gives them text."""
    path = run / "model" / LABEL_TEXTS_FILE
    return LabelTexts.load(path) if path.is_file() else None


@contextmanager
def new_run_beside(out: Path) -> Iterator[Path]:
    """An empty folder beside `out` (a killed earlier attempt's leftovers cleared) that becomes `out` when the block
    ends, or is removed when it raises: an updated run appears whole or not at all."""
    tmp = out.with_name(f".{out.name}.updating")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(out.parent)


def update_labels(run: Path, labels: Path, out: Path, echo=None) -> dict:
    """`xtag update RUN --labels FILE` without documents: RUN2 = RUN with the label file's new labels added from their
    text alone (training/label_text/stage.py add_labels), in seconds; needs a run trained with the label-text stage.
    Written beside and renamed, as update_run does."""
    from xtag.corpus.label_files import read_label_file
    from xtag.training.label_text.stage import add_labels

    run, out = Path(run), Path(out)
    if not (run / "model").is_dir() or not (run / "config.json").is_file():
        raise XtagError(f"{run}: not a finished run (no model/ or config.json)")
    if not (run / "model" / LABEL_TEXT["label-fusion"].path).is_file():
        raise XtagError(
            f"{run}: no label-text stage to add labels to from their text alone; train with --labels "
            "(xtag train --model xlinear --labels FILE), or give --corpus with documents that carry the new labels"
        )
    if out.exists():
        raise XtagError(f"{out}: already exists; choose another --out")
    start = time.perf_counter()
    texts = read_label_file(labels)
    vocab = LabelVocab.load(run / "model" / "labels.json")
    with new_run_beside(out) as tmp:
        tmp.rmdir()  # copytree makes it
        shutil.copytree(run, tmp, ignore=shutil.ignore_patterns("checkpoints"))
        added = add_labels(tmp / "model", texts, vocab.names)
        if not added:
            raise XtagError(f"{labels}: no label the run does not know; nothing to add")
        vocab.with_added(added).save(tmp / "model" / "labels.json")
        kept = tmp / "model" / LABEL_TEXTS_FILE
        old = LabelTexts.load(kept).labels if kept.is_file() else []
        LabelTexts([*old, *(texts.get(i) for i in added)], str(kept)).save(kept)
        summary = {
            **json.loads((run / "summary.json").read_text()),
            "labels": len(vocab) + len(added),
            "total_seconds": round(time.perf_counter() - start, 3),
            "update": {"from_run": run.name, "old_labels": len(vocab), "added_labels": len(added), "from": "text"},
        }
        write_text_atomic(tmp / "summary.json", json.dumps(summary, indent=2))
        RunLog(tmp / "train_log.jsonl", echo)({"event": "done", **summary})
    return summary


def update_run(
    run: Path,
    corpus: Path,
    out: Path,
    format: str = "auto",
    progress: bool = True,
    echo=None,
    clusters: UpdatePlacement = "new",
) -> dict:
    """Write RUN2 = `out` from the run `run` and the corpus file `corpus`; returns its summary."""
    run, out = Path(run), Path(out)
    if not (run / "model").is_dir() or not (run / "config.json").is_file():
        raise XtagError(f"{run}: not a finished run (no model/ or config.json)")
    if out.exists():
        raise XtagError(f"{out}: already exists; choose another --out")
    with reading(run / "config.json", "the run's configuration"):
        config = TrainConfig.load(run / "config.json")
    if (run / "model" / LABEL_TEXT["label-fusion"].path).is_file():  # its vocabulary has labels the tree lacks
        raise XtagError(
            f"{run}: a run with the label-text stage takes new labels from their text (xtag update --labels FILE); "
            "new documents need a retrain (xtag train --config RUN/config.json)"
        )
    chosen = family(config.model)
    chosen.require("update", "xtag update")
    chosen.check_train_extra()
    if not Path(config.corpus).is_file():
        raise XtagError(f"{config.corpus}: the run's training corpus is needed to update it, and is not there")
    start = time.perf_counter()
    vocab = LabelVocab.load(run / "model" / "labels.json")
    featurizer = TfidfFeaturizer.load(run / "model" / "features" / "tfidf")
    old = load_corpus(config.corpus, config.format, skip_bad=config.skip_bad_rows)
    new = load_corpus(corpus, format)
    merged = merge_corpora(old, new)
    grown = grown_vocab(vocab, merged)
    added = grown.names[len(vocab) :]
    if not added:
        raise XtagError(f"{corpus}: no label the run does not know; nothing to add (retrain to learn from it)")

    with new_run_beside(out) as tmp:
        rows = ({"id": i, "text": t, "labels": n} for i, t, n in zip(merged.ids, merged.texts, merged.labels))
        write_jsonl_gz(tmp / CORPUS_FILE, rows, level=1, ensure_ascii=False)
        saved = config.model_copy(update={"corpus": (out / CORPUS_FILE).resolve(), "format": "jsonl"})
        write_text_atomic(tmp / "config.json", saved.model_dump_json(indent=2))
        CorpusFingerprint.of(merged, len(grown)).save(tmp)
        log = RunLog(tmp / "train_log.jsonl", echo)
        log(
            {
                "event": "corpus",
                "documents": len(merged),
                "new_documents": len(new),
                "labels": len(grown),
                "added_labels": len(added),
            }
        )
        differ = CorpusFingerprint.of(old, len(vocab)).differs_from_run(run)
        kept, source = (None, differ) if differ else load_rows(run, len(old), featurizer.dim)
        same_text = same_texts(old, merged)
        X, featurised = combined_rows(featurizer, merged, same_text, kept)
        reuse = {"source": source} if kept is not None else {"why": f"featurising every row: {source}"}
        log({"event": "features", "featurised": featurised, "reused": len(merged) - featurised, **reuse})
        save_rows(tmp / "checkpoints", X)  # for a later update of the new run
        Y, _ = merged.label_matrix(grown)
        t = time.perf_counter()
        data = UpdateInputs(run, tmp / "checkpoints", old, merged, X, Y, len(vocab), differ, same_text)
        result, facts = chosen.resolve("update")(data, config, progress=progress, log=log, clusters=clusters)
        save_model(tmp, grown, _SavedFeatures(run / "model" / "features" / "tfidf"), result, _kept_texts(run))
        summary = {
            "model": config.model,
            "documents": len(merged),
            "labels": len(grown),
            **result.summary(),
            "model_seconds": round(time.perf_counter() - t, 3),
            "total_seconds": round(time.perf_counter() - start, 3),
            "update": {"from_run": run.name, "old_labels": len(vocab), "clusters": clusters, **facts},
        }
        write_text_atomic(tmp / "summary.json", json.dumps(summary, indent=2))
        log({"event": "done", **summary})
    return summary
