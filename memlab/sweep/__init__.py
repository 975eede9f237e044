"""Sweeps: measure every technique of a family over its workload's grid, writing JSON Lines.

Each finished Measurement is appended to the output file and fsync'd at once, so an interrupted
sweep keeps every row it finished; non-``ok`` rows are written like any other and the sweep goes on.

The package by job:

* :mod:`.plan` — the points (a family's grid, a ``--grid`` cross product, the defaults);
* :mod:`.shard` — a deterministic, balanced part of a plan (``--shard i/n``), :mod:`.merge` the parts
  put back together (``memlab merge``);
* :mod:`.run` — measuring the points here (one at a time, ``--jobs`` CPU workers, one worker per
  GPU) or on a Ray cluster (:mod:`.ray_executor`);
* :mod:`.output` — the locked, durable output file (NOTE [ sweep output ]), :mod:`.resume` what it
  already holds;
* :mod:`.eta` — the progress line's estimate, :mod:`.breakdown` where a finished sweep's time went,
  :mod:`.summary` the status counts and table, :mod:`.compare` two sweep files' exact figures;
* :mod:`.sharded` — a sweep of the sharded step over models, strategies and world sizes
  (``--shard-strategy``: one row per rank), run here or on Ray (:mod:`.sharded_ray`), printed by
  :mod:`.sharded_report`, merged by :mod:`.sharded_merge`.
"""
from __future__ import annotations

from .output import SweepOutput, SweepOutputBusy, SweepWriteFailed, open_sweep_output, read_jsonl
from .plan import SweepPoint, parse_grid, plan_sweep
from .resume import FINISHED_STATUSES, already_measured, finished_keys, is_done
from .run import EXECUTORS, check_jobs, run_sweep, visible_gpus
from .summary import format_table, not_ok_lines, status_summary

__all__ = ["SweepPoint", "plan_sweep", "parse_grid", "run_sweep", "read_jsonl", "format_table", "already_measured",
           "finished_keys", "is_done", "check_jobs", "visible_gpus", "SweepOutput", "open_sweep_output",
           "SweepOutputBusy",
           "SweepWriteFailed", "status_summary", "not_ok_lines", "FINISHED_STATUSES", "EXECUTORS"]
