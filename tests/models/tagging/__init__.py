"""Tests of models/tagging/."""
