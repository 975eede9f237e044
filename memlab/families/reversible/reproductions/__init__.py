"""The reversible family's seed reproductions: one module per user report or paper (contract in
:mod:`memlab.reproductions`, which finds them here; discovery does not import them)."""
