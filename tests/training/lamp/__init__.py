"""Tests of training/lamp/."""
