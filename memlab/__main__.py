"""``python -m memlab``: the ``memlab`` command, without the caller's folder on ``sys.path``.

``python -m`` puts the current folder first on ``sys.path`` (the console script does not), so a
``torch.py`` or ``numpy.py`` there would be imported instead of the real one.  The package itself is
already imported when this runs (its submodules load from ``memlab.__path__``), so the current
folder and empty entries (which mean it) are dropped before anything else is imported.
NOTE [ worker isolation ] in memlab/measurement/runner.py does the same for measuring children.
"""
import os
import sys


def _drop_current_folder() -> None:
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the current folder was deleted: nothing can be imported from it
        here = None
    sys.path[:] = [p for p in sys.path if p and os.path.realpath(p) != here]


_drop_current_folder()

from .cli import main  # noqa: E402 - after the path is safe

sys.exit(main())
