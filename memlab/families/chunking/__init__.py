"""The chunking family: chained matmul ``y = (x @ w1) @ w2`` and the ways of chunking its rows."""
