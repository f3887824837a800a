"""Tests of xtag.models.explain.linear."""
