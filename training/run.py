"""A training run: corpus → features → model, written to a run directory with config, log and checkpoints."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from xtag.config.settings import ClusterEnvironment
from xtag.corpus.files import build_vocab, load_corpus
from xtag.corpus.label_files import missing_note, read_label_file
from xtag.models.errors import XtagError, reading
from xtag.models.families import TrainEntry, TrainInputs, family
from xtag.models.features.tfidf import TfidfFeaturizer
from xtag.models.files.atomic import fsync_dir, write_text_atomic
from xtag.models.files.finite_scan import array_files, refuse_nonfinite
from xtag.models.label_texts import LABEL_TEXTS_FILE, LabelTexts
from xtag.models.labels import LabelVocab
from xtag.models.threads import apply as size_thread_pools
from xtag.training.config import TrainConfig
from xtag.training.data.fingerprint import FILE as FINGERPRINT_FILE
from xtag.training.data.fingerprint import CorpusFingerprint
from xtag.training.data.small_data import small_data_warnings
from xtag.training.kept_tfidf import save_rows
from xtag.training.label_text.stage import applies, stage_label_names


class RunLog:
    """JSON-lines event log of a run (train_log.jsonl), echoed to the console by the CLI."""

    def __init__(self, path: Path, echo=None):
        self.path, self.echo = path, echo

    def __call__(self, event: dict) -> None:
        event = {"time": round(time.time(), 3), **event}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(event) + "\n")
        if self.echo:
            self.echo(event)


def _is_main_process() -> bool:
    """False on torchrun ranks other than 0: they help fine-tune but write nothing."""
    return ClusterEnvironment().rank == 0


def train_run(config: TrainConfig, out: Path, resume: bool = False, progress: bool = True, echo=None) -> dict | None:
    """Train into `out`; with `resume`, reuse its config and finished checkpoints."""
    if ClusterEnvironment().torchrun:  # a torchrun rank: die with the launcher (imports torch)
        from xtag.training.deep.distributed import die_with_launcher

        die_with_launcher()
    if not _is_main_process():
        return _helper_rank(config, out, progress)
    config_path = out / "config.json"
    moved_from = None  # a resumed run's corpus path before it moved (same rows, checked by the fingerprint)
    if resume:
        if not config_path.exists():
            raise XtagError(f"{out}: nothing to resume (no config.json)")
        with reading(config_path, "the run's configuration"):
            saved = TrainConfig.load(config_path)
        # The corpus is compared by its rows (the fingerprint, below), so a corpus file that moved resumes.
        moved = saved.corpus != config.corpus and saved.model_copy(update={"corpus": config.corpus}) == config
        if saved != config and not moved:
            raise XtagError(f"{out}: --resume with a different configuration than the run was started with")
        moved_from = saved.corpus if moved else None
        if (out / "checkpoints").is_dir():  # the server's NaN scan (models/files/finite_scan.py), before any is reused
            checkpoints = out / "checkpoints"
            refuse_nonfinite(checkpoints, array_files(checkpoints), "cannot resume from these checkpoints")
    elif (out / "model").exists() or (out / "checkpoints").exists():
        raise XtagError(f"{out}: run directory already holds a run; use --resume or another --out")
    with _removed_on_failure(out, keep=resume):
        return _train(config, out, config_path, echo, progress, resume, moved_from)


def _train(
    config: TrainConfig, out: Path, config_path: Path, echo, progress: bool, resume: bool, moved_from: Path | None
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        write_text_atomic(config_path, config.model_dump_json(indent=2))  # what --resume reads: whole or not at all
    log = RunLog(out / "train_log.jsonl", echo)
    start = time.perf_counter()
    before, finished = earlier_attempts(out) if resume else (0.0, False)  # read before this attempt logs anything

    corpus = load_corpus(config.corpus, config.format, skip_bad=config.skip_bad_rows)
    vocab = build_vocab(corpus)
    fingerprint = CorpusFingerprint.of(corpus, len(vocab))
    if resume:  # before any checkpoint is reused; a moved corpus's new path is saved once its rows are known
        fingerprint.check_resume(out, log, moved_from=moved_from)
        write_text_atomic(config_path, config.model_dump_json(indent=2))
    else:
        fingerprint.save(out)
    log({"event": "corpus", "documents": len(corpus), "labels": len(vocab), "skipped_rows": corpus.skipped})
    if corpus.skipped:
        log({"event": "warning", "message": corpus.skipped_note(), "skipped_lines": corpus.skipped_lines})
    # every pool from the CPUs this process may use; logged once the run is known to go ahead (a refused resume
    # says one line)
    log({"event": "threads", "pools": size_thread_pools()})
    t = time.perf_counter()
    label_texts = _label_texts(config, vocab, log)
    featurizer, X = TfidfFeaturizer.fit(corpus.texts, config.tfidf)
    Y, _ = corpus.label_matrix(vocab)
    config = _with_label_names(config, vocab.names)
    log({"event": "features", "dim": featurizer.dim, "nnz": int(X.nnz), "seconds": time.perf_counter() - t})
    for message in small_data_warnings(len(corpus), featurizer.dim, np.diff(Y.tocsc().indptr)):
        log({"event": "warning", "message": message})

    t = time.perf_counter()
    train: TrainEntry = family(config.model).resolve("train")
    inputs = TrainInputs(
        corpus.texts,
        X,
        Y,
        config,
        out / "checkpoints",
        train_and_export,
        progress,
        log,
        label_texts,
        vocab.names,
        corpus.ids,
    )
    result = train(inputs)
    train_seconds = time.perf_counter() - t
    if applies(config, label_texts):  # the stage's labels: the label file's without training documents appended
        vocab = vocab.with_added(stage_label_names(vocab.names, label_texts)[len(vocab) :])

    save_model(out, vocab, featurizer, result, label_texts)
    if family(config.model).supports("update"):  # what a later `xtag update` reuses instead of featurising again
        save_rows(out / "checkpoints", X)
    summary = {
        "model": config.model,
        "documents": len(corpus),
        "labels": len(vocab),
        **result.summary(),
        "model_seconds": round(train_seconds, 3),
        "total_seconds": round(time.perf_counter() - start, 3),
    }
    # what training this model took, the attempts whose checkpoints were reused included: LaMP's cross-fitting
    # estimate reads it (a resumed main.sh took 13 s for a model that trained in 55 s)
    summary["train_seconds"] = round(before if finished else before + summary["total_seconds"], 3)
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2))
    log({"event": "done", **summary})
    return summary


def earlier_attempts(out: Path) -> tuple[float, bool]:
    """(the training time of a run's earlier attempts, whether one finished), which a resume builds on: a finished
    run's own time (its summary's; the resume then reuses every checkpoint and only loads), else the spans of the
    killed attempts in its log, each from its `corpus` event to its last event."""
    try:
        done = json.loads((out / "summary.json").read_text())
        return float(done.get("train_seconds", done["total_seconds"])), True
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no finished attempt
    spans, first, last = 0.0, None, None
    try:
        lines = (out / "train_log.jsonl").read_text().splitlines()
    except OSError:
        return 0.0, False
    for line in lines:
        try:
            event = json.loads(line)
            at = float(event["time"])
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by the kill
        if event.get("event") == "corpus":  # each attempt starts with it
            spans += (last - first) if first is not None else 0.0
            first = at
        last = at
    return spans + ((last - first) if first is not None else 0.0), False


@contextmanager
def _removed_on_failure(out: Path, keep: bool) -> Iterator[None]:
    """A run that fails before its first checkpoint leaves nothing behind: a stray config.json would make the
    next attempt look like a run to --resume (scripts/main.sh resumes when it finds one). A resumed run, or one
    with checkpoints, is kept: that is what --resume continues."""
    existed = out.exists()
    try:
        yield
    except BaseException:
        if not keep and not (out / "checkpoints").exists() and not (out / "model").exists():
            for name in ("config.json", "train_log.jsonl", FINGERPRINT_FILE):
                (out / name).unlink(missing_ok=True)
            if not existed and out.is_dir() and not any(out.iterdir()):
                out.rmdir()
        raise


def save_model(
    out: Path, vocab: LabelVocab, featurizer: TfidfFeaturizer, model, label_texts: LabelTexts | None = None
) -> None:
    """out/model: labels (and what they say, with --labels), TF-IDF and the trained model (anything with
    `.save(folder)`), which `xtag export` reads; written beside and renamed, so it appears whole or not at all."""
    final = out / "model.tmp"
    shutil.rmtree(final, ignore_errors=True)
    final.mkdir(parents=True)
    vocab.save(final / "labels.json")
    if label_texts is not None:
        label_texts.save(final / LABEL_TEXTS_FILE)
    featurizer.save(final / "features" / "tfidf")
    model.save(final)
    shutil.rmtree(out / "model", ignore_errors=True)
    final.rename(out / "model")
    fsync_dir(out)


def _label_texts(config: TrainConfig, vocab: LabelVocab, log) -> LabelTexts | None:
    """The run's label file, read and checked before any training; the corpus's labels it lacks are named in
    one warning."""
    if config.labels is None:
        return None
    texts = read_label_file(config.labels)
    log({"event": "label_texts", "labels": len(texts), "with_text": sum(t.has_text for t in texts.labels)})
    note = missing_note(texts, vocab.names)
    if note:
        log({"event": "warning", "message": note})
    return texts


def _with_label_names(config: TrainConfig, names: list[str]) -> TrainConfig:
    """A copy of `config` that knows the run's label names, which a propensity file is keyed by
    (training/weighting/label_weights.py); the caller's config stays as it was, equal to the one saved for --resume."""
    config = config.model_copy(deep=True)
    config.missing_labels.bind_labels(names)
    return config


def _helper_rank(config: TrainConfig, out: Path, progress: bool) -> None:
    """A torchrun rank > 0: same data and features as rank 0, joins fine-tuning, then leaves."""
    fam = family(config.model)
    fam.require("torchrun", "torchrun with several processes")
    corpus = load_corpus(config.corpus, config.format, skip_bad=config.skip_bad_rows)
    vocab = build_vocab(corpus)
    _, X = TfidfFeaturizer.fit(corpus.texts, config.tfidf)
    Y, _ = corpus.label_matrix(vocab)
    config = _with_label_names(config, vocab.names)
    train: TrainEntry = fam.resolve("train")
    train(TrainInputs(corpus.texts, X, Y, config, out / "checkpoints", train_and_export, progress=False))
    return None


def train_and_export(config: TrainConfig, folder: Path, progress: bool) -> Path:
    """Train `config` into folder/run and export it to folder/bundle, which it returns: the callback a family that
    trains on another model's output gets in TrainInputs (LaMP's cross-fitting retrains its first stage per fold),
    so that family imports neither this module nor the exporter."""
    from xtag.training.export.export_run import export_run

    train_run(config, folder / "run", progress=progress)
    export_run(folder / "run", folder / "bundle")
    return folder / "bundle"
