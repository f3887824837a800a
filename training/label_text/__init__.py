"""Training of the label-text stage's encoder (issue 49): contrastive, on CPU."""
