"""The label tree: PIFA label embeddings, balanced k-means, and the compiled helpers it shares with XR-Linear."""
