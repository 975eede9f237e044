"""The transformer family: a decoder-only language model, its attention and loss variants."""
