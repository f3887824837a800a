"""Tests of xtag.models.lamp."""
