"""The torch-free core: what a measurement is (:mod:`.record`, :mod:`.setting`, :mod:`.units`), the
tunable parameters (:mod:`.params`), the advisor's declarations (:mod:`.declaration`, :mod:`.loops`),
the host a figure holds for (:mod:`.host`), the environment settings (:mod:`.env_settings`), safe file
writes (:mod:`.atomic`), the complexity read off the data (:mod:`.complexity`) and the shared
exceptions (:mod:`.errors`).

# NOTE [ the torch line ]
Nothing in this package imports torch, numpy or pandas (``tests/test_structure.py`` checks every
module in a fresh interpreter): the CLI validates names and values with it before torch loads, and the
read side (:mod:`memlab.results`, :mod:`memlab.site`) runs where torch is absent.
"""
