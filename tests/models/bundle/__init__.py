"""Tests of xtag.models.bundle."""
