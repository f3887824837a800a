"""Tests of training/data/."""
