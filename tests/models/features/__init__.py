"""Tests of xtag.models.features."""
