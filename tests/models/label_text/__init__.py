"""Tests of xtag.models.label_text."""
