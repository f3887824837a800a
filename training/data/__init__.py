"""Corpora: the loaders (JSONL, Annif TSV, AttentionXML), the apt-list corpora and drop-labels; numpy only."""
