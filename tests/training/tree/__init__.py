"""Tests of training/tree/."""
