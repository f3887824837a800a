"""Corpus reading and writing (JSONL, Annif TSV, AttentionXML): the floor training, evaluation and cluster share."""
