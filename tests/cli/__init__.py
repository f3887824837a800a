"""Tests of the xtag command line."""
