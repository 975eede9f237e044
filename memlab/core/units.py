"""Units memlab reports in.  Torch-free: the record core (:mod:`memlab.core.record`) and the site import it.

Every memory figure memlab stores is an integer number of bytes; MiB (2**20 bytes) is only
how figures are displayed.  Times are seconds.
"""
from __future__ import annotations

__all__ = ["MiB"]

#: bytes in one mebibyte (2**20), the display unit of every memory figure
MiB = 1024 * 1024
