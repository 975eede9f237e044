"""Rendering page contexts to files: jinja2 (autoescape on) and the static assets, copied as they are.

# NOTE [ offline, deterministic site ]
Pages load only ``static/`` files: plotly.js is shipped in ``site/static`` (copied once from the
plotly package), charts are drawn by ``static/site.js`` from each chart element's ``data-figure``
attribute (the figure JSON, HTML-escaped by autoescape like every other string from results), and
a Content-Security-Policy meta tag allows scripts, styles, images and fonts from the site itself only,
so no page can reach the network.  Output bytes depend only on the inputs: figures are canonical JSON,
pages carry no build time, files are written in a fixed order with ``\\n`` newlines.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jinja2

__all__ = ["SITE_ROOT", "MARKER", "render_site"]

#: ``site/`` at the repository root: ``templates/`` and ``static/``.
SITE_ROOT = Path(__file__).resolve().parents[2] / "site"
#: A file that marks a folder as memlab's built site (safe to replace on the next build).
MARKER = ".memlab-site"


def _environment(templates: Path) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=True,
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=True, lstrip_blocks=True)


def _prepare(out_dir: Path) -> None:
    """Empty ``out_dir`` if it is a previous build; refuse a non-empty folder that is not."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ValueError(f"site output {out_dir} exists and is not a folder")
        if any(out_dir.iterdir()):
            if not (out_dir / MARKER).exists():
                raise ValueError(f"site output {out_dir} is a non-empty folder that memlab did not build; "
                                 "choose an empty or new folder")
            shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)


def render_site(ctx: dict[str, Any], out_dir: Path, site_root: Path = SITE_ROOT) -> Path:
    """Write every page in ``ctx["pages"]`` and copy ``site_root/static`` to ``out_dir/static``.

    Returns:
        the path of ``index.html``.

    Raises:
        FileNotFoundError: ``site_root`` lacks ``templates/`` or ``static/``.
        ValueError: ``out_dir`` is a non-empty folder without the build marker.
    """
    templates, static = site_root / "templates", site_root / "static"
    for folder in (templates, static):
        if not folder.is_dir():
            raise FileNotFoundError(f"site assets folder {folder} is missing (memlab's site/ checkout)")
    out_dir = Path(out_dir)
    _prepare(out_dir)
    env = _environment(templates)
    for page in ctx["pages"]:
        html = env.get_template(page["template"]).render(page=page, nav=ctx["nav"], static="static")
        (out_dir / page["path"]).write_text(html, encoding="utf-8", newline="\n")
    shutil.copytree(static, out_dir / "static")
    (out_dir / MARKER).write_text("built by memlab site; this folder is replaced on the next build\n")
    return out_dir / "index.html"
