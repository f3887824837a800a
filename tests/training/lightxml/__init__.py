"""Tests of training/lightxml/."""
