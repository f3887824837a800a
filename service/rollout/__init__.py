"""Rollouts: a model's versions and the traffic between them (traffic.py)."""
