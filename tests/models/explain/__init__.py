"""Tests of xtag.models.explain."""
