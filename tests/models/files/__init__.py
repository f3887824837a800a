"""Tests of models/files/."""
