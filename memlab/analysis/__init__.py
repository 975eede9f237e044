"""Analyses built on memlab's measurements and timelines (e.g. the slice_backward allocations)."""
