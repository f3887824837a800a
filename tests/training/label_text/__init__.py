"""Tests of xtag.training.label_text."""
