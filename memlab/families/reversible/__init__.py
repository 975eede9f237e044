"""The reversible family: a stack of coupling blocks, stored or reconstructed in backward."""
