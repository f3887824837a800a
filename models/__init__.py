"""What a bundle is and how it predicts: torch-free inference shared by evaluation and the service."""
