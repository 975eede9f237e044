"""The ``memlab`` parser: the shared option groups and one sub-parser per command module."""
from __future__ import annotations

from . import advise, bench_harness, check, compare, listing, measure, merge, reproduce, site, sweep, timeline
from .options import OneLineParser, shared_options

__all__ = ["build_parser"]


def build_parser() -> OneLineParser:
    shared = shared_options()
    p = OneLineParser(prog="memlab", description="Honest memory numbers for memory-saving PyTorch techniques.",
                      parents=[shared.common])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           help="what to do; memlab COMMAND --help lists its options")
    for module in (listing, measure, sweep, merge):
        module.add_parser(sub, shared)
    timeline.add_parsers(sub, shared)
    for module in (check, reproduce, site, advise, compare, bench_harness):
        module.add_parser(sub, shared)
    p.commands = tuple(sub.choices)
    return p
