"""Rendering page contexts to files: jinja2 (autoescape on) and the static assets, copied as they are.

# NOTE [ offline, deterministic site ]
Pages load only ``static/`` files: plotly.js is shipped in ``site/static`` (copied once from the
plotly package), charts are drawn by ``static/site.js`` from each chart element's ``data-figure``
attribute (the figure JSON, HTML-escaped by autoescape like every other string from results), and
a Content-Security-Policy meta tag allows scripts, styles, images and fonts from the site itself only,
so no page can reach the network.  Each table's rows are also written beside the pages as CSV and
JSON (``tables/<page>--<table>.csv``/``.json``), linked from the table.  Output bytes depend only on
the inputs: figures are canonical JSON, pages carry no build time, files are written in a fixed order
with ``\\n`` newlines.

# NOTE [ the output folder ]
``--out`` is refused (one line, before anything is read, written or deleted) when it is a symbolic
link, when it is or contains an input (results, data, ``--run`` files, ``site/``) or lies inside an
input folder, or when it is a non-empty folder without :data:`MARKER`.  The site is written to a
temporary folder beside it and renamed into place when complete: a failed build leaves the previous
site (or nothing) there, never half a site.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

import jinja2

__all__ = ["SITE_ROOT", "MARKER", "check_output", "render_site"]

#: ``site/`` at the repository root: ``templates/`` and ``static/``.
SITE_ROOT = Path(__file__).resolve().parents[2] / "site"
#: A file that marks a folder as memlab's built site (safe to replace on the next build).
MARKER = ".memlab-site"


def _environment(templates: Path) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=True,
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=True, lstrip_blocks=True)


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_output(out_dir: Path, input_dirs: Iterable[Path] = (), input_files: Iterable[Path] = ()) -> None:
    """Refuse an output folder that a build would have to destroy inputs or foreign files to use.

    Nothing is written or deleted here; :func:`render_site` calls it again before replacing anything.
    Paths are compared with symbolic links resolved.

    Raises:
        ValueError (one line): ``out_dir`` is a symbolic link; is, contains or lies inside one of
        ``input_dirs``; is or contains one of ``input_files``; exists and is not a folder; or is a
        non-empty folder without :data:`MARKER` (not a previous build).
    """
    out = Path(out_dir)
    if os.path.islink(out):
        raise ValueError(f"site output {out} is a symbolic link; memlab builds only into a real folder "
                         "(remove the link or choose another --out)")
    real = Path(os.path.realpath(out))
    for folder in input_dirs:
        inp = Path(os.path.realpath(folder))
        if _within(inp, real):
            raise ValueError(f"site output {out} contains the input {folder}, which replacing it would delete; "
                             "choose a folder outside the inputs")
        if _within(real, inp):
            raise ValueError(f"site output {out} is inside the input folder {folder}; "
                             "choose a folder outside the inputs")
    for file in input_files:
        if _within(Path(os.path.realpath(file)), real):
            raise ValueError(f"site output {out} contains the input file {file}, which replacing it would delete; "
                             "choose a folder outside the inputs")
    if os.path.lexists(out):
        if not out.is_dir():
            raise ValueError(f"site output {out} exists and is not a folder")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise ValueError(f"site output {out} is a non-empty folder that memlab did not build; "
                             "choose an empty or new folder")


def _write(ctx: dict[str, Any], folder: Path, templates: Path, static: Path) -> None:
    env = _environment(templates)
    for page in ctx["pages"]:
        html = env.get_template(page["template"]).render(page=page, nav=ctx["nav"], footer=ctx.get("footer"),
                                                         colors=ctx.get("colors", {}),
                                                         static="static")
        # errors="replace": a lone surrogate from a JSON "\ud800" escape must not stop the build
        (folder / page["path"]).write_text(html, encoding="utf-8", errors="replace", newline="\n")
        for rel, text in page.get("files", {}).items():  # table downloads (tables/<page>--<id>.csv/.json)
            path = folder / rel
            if not _within(Path(os.path.normpath(path)), folder):
                raise ValueError(f"download {rel!r} of {page['path']} would lie outside the site")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", errors="replace", newline="\n")
    shutil.copytree(static, folder / "static")
    (folder / MARKER).write_text("built by memlab site; this folder is replaced on the next build\n")


def _swap_in(new: Path, out: Path) -> None:
    """Put the finished build ``new`` at ``out``, replacing a previous build there (two renames)."""
    old = None
    if os.path.lexists(out):
        if any(out.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.rename(out, old)  # onto the empty folder mkdtemp made
        else:
            os.rmdir(out)
    try:
        os.rename(new, out)
    except OSError:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def render_site(ctx: dict[str, Any], out_dir: Path, site_root: Path = SITE_ROOT) -> Path:
    """Write every page in ``ctx["pages"]`` and copy ``site_root/static`` to ``out_dir/static``.

    The site is built in a temporary folder beside ``out_dir`` and moved into place when complete,
    so a failed build leaves no half site (and a previous build stays until the new one is ready).

    Returns:
        the path of ``index.html``.

    Raises:
        FileNotFoundError: ``site_root`` lacks ``templates/`` or ``static/``.
        ValueError: ``out_dir`` is refused by :func:`check_output` (with ``site_root`` as an input).
    """
    templates, static = site_root / "templates", site_root / "static"
    for folder in (templates, static):
        if not folder.is_dir():
            raise FileNotFoundError(f"site assets folder {folder} is missing (memlab's site/ checkout)")
    check_output(Path(out_dir), input_dirs=[site_root])
    out = Path(os.path.realpath(out_dir))
    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".building", dir=out.parent))
    try:
        _write(ctx, building, templates, static)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(building, 0o777 & ~umask)  # mkdtemp's folder is private; a site is not
        _swap_in(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return Path(out_dir) / "index.html"
