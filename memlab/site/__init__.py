"""The results site: static HTML built from results on disk, never importing torch.

Pipeline (one way): result files -> tidy DataFrames (:mod:`memlab.results`) -> page contexts built by
small steps (:mod:`memlab.site.context`) -> HTML via jinja2 with autoescape and plotly figures as JSON
(:mod:`memlab.site.render`), with ``site/static`` (CSS, ``site.js``, a local ``plotly.min.js``) copied.

Example:
    >>> from memlab.site import build_site                           # doctest: +SKIP
    >>> build_site(Path("results"), Path("data"), Path("/tmp/memlab-site"))
    PosixPath('/tmp/memlab-site/index.html')
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .context import build_context, input_files
from .render import SITE_ROOT, check_output, render_site

__all__ = ["build_site"]


def build_site(results_dir: Path, data_dir: Path, out_dir: Path, *, extra_runs: Sequence[Path] = (),
               site_root: Path = SITE_ROOT) -> Path:
    """Build the static site from asv results and memlab data; returns the path of ``index.html``.

    Args:
        results_dir: asv results tree (``benchmarks.json``, ``<machine>/*.json``); may be missing.
        data_dir: memlab data: ``sweeps/*.jsonl``, ``timelines/*.json``, ``reproductions/*.json``.
        out_dir: output folder: new, empty, or a previous build (which is replaced once the new one
            is complete).  Refused before anything is read or written when it is a symbolic link,
            is or contains an input, or lies inside an input folder (see NOTE [ the output folder ]).
        extra_runs: more sweep JSON Lines files (e.g. a fresh quick sweep).
        site_root: folder holding ``templates/`` and ``static/`` (default: the repository's ``site/``).

    Same inputs give the same bytes.  Malformed input files warn (:class:`memlab.results.ResultsWarning`,
    naming the file and line) and are listed on the methodology page; the site is built from the rest.

    Raises:
        ValueError: ``out_dir`` is refused (one line; nothing was written or deleted).
    """
    extra_runs = [Path(p) for p in extra_runs]
    check_output(Path(out_dir), input_dirs=[Path(results_dir), Path(data_dir), Path(site_root)],
                 input_files=input_files(Path(results_dir), Path(data_dir), extra_runs))
    ctx = build_context(Path(results_dir), Path(data_dir), extra_runs)
    return render_site(ctx, Path(out_dir), Path(site_root))
