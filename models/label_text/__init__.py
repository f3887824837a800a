"""The label-text stage's encoder: documents and label texts into one space (issue 49), torch-free."""
