"""Offline side of xtag: corpora, label trees, trainers, export and evaluation."""
