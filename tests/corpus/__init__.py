"""Tests of corpus/."""
