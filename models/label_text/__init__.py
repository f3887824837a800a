"""The label-text stage: label texts and documents in one embedding space, searched by a FAISS index and fused with
the tree's scores (models/label_text/model.py)."""
