"""Reading results from disk into tidy pandas DataFrames, validating loudly (see :mod:`.runs`)."""
from .runs import *  # noqa: F401,F403
from .runs import __all__  # noqa: F401
