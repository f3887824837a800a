"""Tests of training/deep/."""
