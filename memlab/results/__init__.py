"""Reading results from disk into tidy pandas DataFrames, validating loudly.

Four inputs, four loaders, one module per job (none imports torch; the site runs on them alone):

* :func:`load_runs` (:mod:`.runs`) -- memlab sweep files (JSON Lines, one ``Measurement.to_dict()``
  per line) -> one row per measurement; :func:`validate_measurement` and :func:`ranking_status` are
  the checks and the site's verdict.
* :func:`load_asv_results` (:mod:`.asv`) -- an asv 0.6 results tree (``benchmarks.json``,
  ``<machine>/machine.json``, ``<machine>/<commit>-<env>.json``) -> one row per benchmark,
  parameter combination, machine and commit.
* :func:`load_timelines` (:mod:`.timelines`) -- ``Timeline.to_dict()`` JSON files -> validated dicts.
* :func:`load_reproductions` (:mod:`.seeds`) -- seed-reproduction JSON files (contract in
  :mod:`memlab.reproductions`) -> validated dicts.

Every file is read as hostile by :mod:`.reading` (see NOTE [ hostile input files ]): a file, line or
value that is malformed, partial, of the wrong type, out of range or not a regular file never stops
the others: it is left out with one :class:`ResultsWarning` that names the file (and line).

Each measurement row also carries the site's verdict (see NOTE [ what the site ranks ]): only rows
whose ``status_shown`` is ``ok`` are ever ranked, called best or drawn.

Memory columns are bytes, time columns seconds, throughput samples/s; step times carry their spread and
the load-robust relative step time (see NOTE [ step times on the site ]).
"""
from __future__ import annotations

from ..core.record import STATUSES, VERDICTS
from .asv import ASV_COLUMNS, load_asv_machines, load_asv_results
from .reading import (MAX_FILE_BYTES, MAX_JSON_DEPTH, PROBLEMS_PER_FILE, ResultsWarning, list_input_files,
                      load_json_objects, short_repr, shown_path)
from .runs import (RUN_COLUMNS, canonical_params, family_baselines, find_sweep_files, load_runs, machine_of,
                   ranking_status, sweep_records, validate_measurement)
from .seeds import load_reproductions
from .timelines import load_timelines

__all__ = [
    "ResultsWarning", "RUN_COLUMNS", "ASV_COLUMNS", "VERDICTS", "STATUSES",
    "MAX_JSON_DEPTH", "MAX_FILE_BYTES", "PROBLEMS_PER_FILE",
    "load_runs", "find_sweep_files", "list_input_files", "load_asv_results", "load_asv_machines",
    "load_timelines", "load_reproductions", "validate_measurement", "ranking_status", "family_baselines",
    "canonical_params", "load_json_objects", "sweep_records", "machine_of", "shown_path", "short_repr",
]
