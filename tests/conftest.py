from pathlib import Path

import pytest

PLUGIN = Path(__file__).parent / "plugins" / "patterns.py"


@pytest.fixture(scope="session")
def patterns():
    """The hand-computed allocation patterns plug-in, loaded once."""
    import memlab

    memlab.load_plugin(PLUGIN)
    import sys

    return next(m for n, m in sys.modules.items() if n.startswith("memlab_plugin_") and n.endswith("_patterns"))
