"""Tests of xtag.training: corpora, the label tree, each family's trainer and exporter."""
