"""Tests of xtag.models.engine."""
