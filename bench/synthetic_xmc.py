"""A seeded synthetic extreme multi-label corpus, written in xtag's corpus format (train/test.jsonl.gz).

    .venv/bin/python -m bench.synthetic_xmc --labels 1000000 --train-docs 300000 --test-docs 30000 \\
        --out bench/out/synthetic_1m

writes OUT/train.jsonl.gz and OUT/test.jsonl.gz, one `{"id", "text", "labels"}` row per document (what
`xtag train --corpus` and bench/xlinear_vs_pecos.py `--data OUT` read), and OUT/meta.json (the parameters
and what came out: label-frequency quantiles, token counts, distinct words). Same arguments, same files.

What it models, and why (XMC benchmarks need scale, a long tail and a learnable structure; random
labels on random text have none of the last):

- Labels. L labels with Zipf-distributed frequencies (`--zipf`, p(rank r) ∝ r^-zipf over a random
  permutation of the label ids) and, as in the public XMC data sets, a long tail: every label occurs in
  at least one training document (each label gets one occurrence, the remaining label slots are drawn
  from the Zipf law), so at 1M labels on 300K documents most labels have one or two training
  documents and a few dozen have thousands. Test labels come from the same mixture, so every test
  label is a training label.
- Hierarchy. Labels sit in clusters (`--cluster-size` labels) and clusters in topics
  (`--clusters-per-topic` clusters). A document has 1-10 labels (1 + Binomial, mean `--labels-per-doc`);
  a rare label's occurrences are mostly (80 %) placed in documents whose other rare labels are of the
  same topic, frequent labels anywhere: labels co-occur with related labels, as real tags do.
- Words. Each label has three indicative words (drawn from a shared pool of L/5 words, so a word is
  ambiguous between ~15 unrelated labels and only the combination identifies the label, each word
  written with probability 0.8), each cluster four words, each topic eight. Per label of a document the
  text gets the label's words, two of its cluster's words, one of its topic's words, and with probability
  0.3 one word of a sibling label (same cluster), the near-miss a ranker must tell apart. Around them,
  `--background-words` (mean, Poisson) words drawn from a Zipf law (`--word-zipf`) over a background
  vocabulary (`--background-vocab`): most of a document, as function words and generic terms are.
  Words are shuffled within the document and spelt as pronounceable letter strings (frequent background
  words are the short ones), so scikit-learn's tokeniser sees one token per word.
- Why a label tree helps: labels of one cluster share cluster and topic words, so their PIFA embeddings
  (the mean TF-IDF of their documents) are close and hierarchical k-means groups them; the rankers near
  the root learn cluster and topic words, the leaf rankers a label's own words against its siblings'.

TF-IDF of this text is sparse as real text is. At the 1M-label defaults (300K training documents) the
word vocabulary is 383K words (50K background, 8K topic, 125K cluster, 200K label-pool words), and
xtag's default featuriser (uni+bigrams, min_df 2) fits 1.42M features, 383K unigrams and 1.04M bigrams
(the background bigrams of frequent words survive min_df, random pairs of rare words do not), with 70
non-zeros per document, in about a minute and 3.5 GB; unigrams alone (bench/xlinear_vs_pecos.py
--ngram-max 1) give the 383K. At these defaults labels are thin, as the label slots allow (1.5M for 1M
labels): 87 % of the labels have one training document, 99 % at most five, the most frequent 33K;
more --train-docs thickens the tail. meta.json reports these figures for each corpus generated.

Generation is vectorised numpy (only the final join of each document's words and the JSON lines are
per document): the 1M-label defaults take 40 s and 1.2 GB on one core (train.jsonl.gz 52 MB).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

CONSONANTS = list("bdfghklmnprstvz")
VOWELS = list("aeiou")
SYLLABLES = np.array([c + v for c in CONSONANTS for v in VOWELS])  # 75

LABEL_WORDS = 3  # indicative words per label
LABEL_WORD_KEEP = 0.8  # each written with this probability
LABEL_POOL_PER_LABEL = 0.2  # label words come from a pool of L/5 words (a word is shared by ~15 labels)
CLUSTER_WORDS, CLUSTER_DRAWS = 4, 2
TOPIC_WORDS, TOPIC_DRAWS = 8, 1
SIBLING_NOISE = 0.3  # probability of one word of a sibling label (same cluster) per label of a document
SAME_TOPIC = 0.8  # a rare label's occurrence is placed among its topic's documents with this probability
HEAD_COUNT = 10  # labels with more occurrences than this (in one split) are placed uniformly instead
MAX_LABELS = 10


def words(n: int) -> np.ndarray:
    """n distinct pronounceable words, shortest first: bijective base-75 numerals over consonant-vowel syllables."""
    out = np.full(n, "", dtype=object)
    rest = np.arange(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    while alive.any():
        digit = rest[alive] % len(SYLLABLES)
        out[alive] = SYLLABLES[digit].astype(object) + out[alive]
        rest[alive] = rest[alive] // len(SYLLABLES) - 1
        alive &= rest >= 0
    return out


def zipf_probs(n: int, exponent: float) -> np.ndarray:
    p = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return p / p.sum()


def sample(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """Draws from the distribution with cumulative probabilities `cdf` (ids 0..len-1)."""
    return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), len(cdf) - 1)


def doc_sizes(rng: np.random.Generator, n_docs: int, mean: float) -> np.ndarray:
    """Labels per document: 1 + Binomial(MAX_LABELS - 1, ·), so 1..MAX_LABELS with the given mean."""
    return 1 + rng.binomial(MAX_LABELS - 1, (mean - 1) / (MAX_LABELS - 1), n_docs)


def ordinal(values: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same value (0 for a value's first occurrence)."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(values)]))
    out = np.empty(len(values), dtype=np.int64)
    out[order] = np.arange(len(values)) - run_start
    return out


def assign(
    rng: np.random.Generator, occurrences: np.ndarray, sizes: np.ndarray, topic_of: np.ndarray, n_topics: int
) -> tuple[np.ndarray, np.ndarray]:
    """Place label occurrences into documents of the given sizes; returns (indptr, labels), each document's
    labels sorted and distinct.

    Frequent labels (more than HEAD_COUNT occurrences) go to uniformly random slots. The others fill the
    remaining slots in document order, sorted by a topic key (their own topic with probability SAME_TOPIC,
    else a random one), then by how many times the label was already placed, then at random: consecutive
    documents draw from one topic, and one label's occurrences land in different documents.
    """
    rng.shuffle(occurrences)
    counts = np.bincount(occurrences, minlength=len(topic_of))
    head = counts[occurrences] > HEAD_COUNT
    n_slots = int(sizes.sum())
    is_head_slot = np.zeros(n_slots, dtype=bool)
    is_head_slot[rng.choice(n_slots, int(head.sum()), replace=False)] = True
    slots = np.empty(n_slots, dtype=np.int64)
    slots[is_head_slot] = occurrences[head]
    tail = occurrences[~head]
    key = np.where(rng.random(len(tail)) < SAME_TOPIC, topic_of[tail], rng.integers(0, n_topics, len(tail)))
    slots[~is_head_slot] = tail[np.lexsort((rng.random(len(tail)), ordinal(tail), key))]
    doc = np.repeat(np.arange(len(sizes)), sizes)
    # distinct labels per document (a frequent label can be drawn twice for one document)
    order = np.lexsort((slots, doc))
    doc, slots = doc[order], slots[order]
    keep = np.r_[True, (doc[1:] != doc[:-1]) | (slots[1:] != slots[:-1])]
    doc, slots = doc[keep], slots[keep]
    # shuffle document order, so files are not grouped by topic
    perm = rng.permutation(len(sizes))
    rank = np.empty_like(perm)
    rank[perm] = np.arange(len(perm))
    order = np.lexsort((slots, rank[doc]))
    indptr = np.r_[0, np.cumsum(np.bincount(rank[doc], minlength=len(sizes)))]
    return indptr, slots[order]


class Vocabulary:
    """Word ids: [background | topic words | cluster words | label pool], and each label's words."""

    def __init__(self, rng: np.random.Generator, n_labels: int, args: argparse.Namespace):
        self.n_labels, self.cluster_size = n_labels, args.cluster_size
        self.cluster_of = np.arange(n_labels) // args.cluster_size
        self.n_clusters = int(self.cluster_of[-1]) + 1
        self.topic_of_cluster = np.arange(self.n_clusters) // args.clusters_per_topic
        self.n_topics = int(self.topic_of_cluster[-1]) + 1
        self.topic_of = self.topic_of_cluster[self.cluster_of]
        n_pool = max(LABEL_WORDS * 4, int(n_labels * LABEL_POOL_PER_LABEL))
        self.background = args.background_vocab
        self.topic_base = self.background
        self.cluster_base = self.topic_base + self.n_topics * TOPIC_WORDS
        self.pool_base = self.cluster_base + self.n_clusters * CLUSTER_WORDS
        self.size = self.pool_base + n_pool
        # each label: LABEL_WORDS distinct pool words (a random first one, then random steps forward, together
        # less than the pool's size)
        steps = rng.integers(1, max(2, n_pool // LABEL_WORDS), (n_labels, LABEL_WORDS))
        steps[:, 0] = rng.integers(0, n_pool, n_labels)
        self.label_words = self.pool_base + np.cumsum(steps, axis=1) % n_pool
        self.background_cdf = np.cumsum(zipf_probs(self.background, args.word_zipf))
        self.spelling = words(self.size)

    def tokens(
        self, rng: np.random.Generator, indptr: np.ndarray, labels: np.ndarray, background_mean: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(document of each token, word id of each token), tokens of one document in random order."""
        n_docs = len(indptr) - 1
        entry_doc = np.repeat(np.arange(n_docs), np.diff(indptr))
        parts_doc, parts_word = [], []
        own = rng.random((len(labels), LABEL_WORDS)) < LABEL_WORD_KEEP
        parts_doc.append(np.repeat(entry_doc, LABEL_WORDS)[own.ravel()])
        parts_word.append(self.label_words[labels].ravel()[own.ravel()])
        cluster = self.cluster_of[labels]
        for _ in range(CLUSTER_DRAWS):
            parts_doc.append(entry_doc)
            parts_word.append(self.cluster_base + cluster * CLUSTER_WORDS + rng.integers(0, CLUSTER_WORDS, len(labels)))
        topic = self.topic_of[labels]
        for _ in range(TOPIC_DRAWS):
            parts_doc.append(entry_doc)
            parts_word.append(self.topic_base + topic * TOPIC_WORDS + rng.integers(0, TOPIC_WORDS, len(labels)))
        noisy = rng.random(len(labels)) < SIBLING_NOISE
        first = cluster[noisy] * self.cluster_size
        size = np.minimum(first + self.cluster_size, self.n_labels) - first  # the last cluster may be smaller
        sibling = first + (rng.random(len(first)) * size).astype(np.int64)
        parts_doc.append(entry_doc[noisy])
        parts_word.append(self.label_words[sibling, rng.integers(0, LABEL_WORDS, len(sibling))])
        n_background = np.maximum(rng.poisson(background_mean, n_docs), 1)
        parts_doc.append(np.repeat(np.arange(n_docs), n_background))
        parts_word.append(sample(rng, self.background_cdf, int(n_background.sum())))
        doc, word = np.concatenate(parts_doc), np.concatenate(parts_word)
        order = np.lexsort((rng.random(len(doc)), doc))
        return doc[order], word[order]


def write_split(
    path: Path, prefix: str, indptr: np.ndarray, labels: np.ndarray, doc: np.ndarray, word: np.ndarray, vocab
) -> dict:
    names = np.array([f"L{j:0{len(str(vocab.n_labels - 1))}d}" for j in range(vocab.n_labels)], dtype=object)
    spelt = vocab.spelling[word]
    token_ptr = np.r_[0, np.cumsum(np.bincount(doc, minlength=len(indptr) - 1))]
    width = len(str(len(indptr) - 1))
    with io.TextIOWrapper(gzip.GzipFile(path, "wb", compresslevel=6, mtime=0), encoding="utf-8") as fh:
        lines = []
        for i in range(len(indptr) - 1):
            text = " ".join(spelt[token_ptr[i] : token_ptr[i + 1]])
            row = {
                "id": f"{prefix}-{i:0{width}d}",
                "text": text,
                "labels": names[labels[indptr[i] : indptr[i + 1]]].tolist(),
            }
            lines.append(json.dumps(row))
            if len(lines) == 10_000:
                fh.write("\n".join(lines) + "\n")
                lines = []
        if lines:
            fh.write("\n".join(lines) + "\n")
    return {
        "documents": len(indptr) - 1,
        "label_mentions": int(len(labels)),
        "labels_per_doc_mean": round(len(labels) / (len(indptr) - 1), 3),
        "tokens_per_doc_mean": round(len(word) / (len(indptr) - 1), 2),
        "distinct_words": int(len(np.unique(word))),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", type=int, default=1_000_000)
    ap.add_argument("--train-docs", type=int, default=300_000)
    ap.add_argument("--test-docs", type=int, default=30_000)
    ap.add_argument("--zipf", type=float, default=1.0, help="exponent of the label-frequency Zipf law")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True, help="folder for train.jsonl.gz, test.jsonl.gz, meta.json")
    ap.add_argument("--labels-per-doc", type=float, default=5.0, help=f"mean labels per document (1..{MAX_LABELS})")
    ap.add_argument("--cluster-size", type=int, default=32, help="labels per cluster (they share cluster words)")
    ap.add_argument("--clusters-per-topic", type=int, default=32, help="clusters per topic (topic words)")
    ap.add_argument("--background-words", type=float, default=30.0, help="mean background words per document")
    ap.add_argument("--background-vocab", type=int, default=50_000, help="background vocabulary size")
    ap.add_argument("--word-zipf", type=float, default=1.1, help="exponent of the background words' Zipf law")
    args = ap.parse_args(argv)
    if not 1 <= args.labels_per_doc <= MAX_LABELS:
        ap.error(f"--labels-per-doc must be within 1..{MAX_LABELS}")
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    L = args.labels

    train_sizes = doc_sizes(rng, args.train_docs, args.labels_per_doc)
    test_sizes = doc_sizes(rng, args.test_docs, args.labels_per_doc)
    n_slots = int(train_sizes.sum())
    if n_slots < L:
        ap.error(
            f"{args.train_docs} training documents have {n_slots} label slots, fewer than {L} labels: every label "
            f"must occur in training; raise --train-docs or --labels-per-doc"
        )
    p = zipf_probs(L, args.zipf)[rng.permutation(L)]  # p[label id]: its Zipf probability (random rank)
    train_counts = 1 + rng.multinomial(n_slots - L, p)
    train_occ = np.repeat(np.arange(L), train_counts)
    # test labels: the training labels' marginal (one guaranteed occurrence each, the rest Zipf)
    n_test = int(test_sizes.sum())
    uniform = rng.random(n_test) < L / n_slots
    test_occ = np.where(uniform, rng.integers(0, L, n_test), sample(rng, np.cumsum(p), n_test))

    vocab = Vocabulary(rng, L, args)
    meta = {"parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    args.out.mkdir(parents=True, exist_ok=True)
    for split, occ, sizes in (("train", train_occ, train_sizes), ("test", test_occ, test_sizes)):
        indptr, labels = assign(rng, occ, sizes, vocab.topic_of, vocab.n_topics)
        doc, word = vocab.tokens(rng, indptr, labels, args.background_words)
        meta[split] = write_split(args.out / f"{split}.jsonl.gz", split, indptr, labels, doc, word, vocab)
        if split == "train":
            freq = np.bincount(labels, minlength=L)  # after merging a label drawn twice for one document
        print(f"{split}: {meta[split]} ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    meta["labels"] = {
        "labels": L,
        "clusters": vocab.n_clusters,
        "topics": vocab.n_topics,
        "train_frequency": {
            "min": int(freq.min()),
            "max": int(freq.max()),
            "quantiles_50_90_99_99.9": [float(np.quantile(freq, q)) for q in (0.5, 0.9, 0.99, 0.999)],
            "share_with_1_doc": round(float(np.mean(freq == 1)), 4),
            "share_with_at_most_5_docs": round(float(np.mean(freq <= 5)), 4),
        },
    }
    meta["vocabulary"] = {
        "words": vocab.size,
        "background": vocab.background,
        "topic_words": vocab.n_topics * TOPIC_WORDS,
        "cluster_words": vocab.n_clusters * CLUSTER_WORDS,
        "label_pool": vocab.size - vocab.pool_base,
    }
    meta["seconds"] = round(time.perf_counter() - start, 1)
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"written {args.out} in {meta['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
