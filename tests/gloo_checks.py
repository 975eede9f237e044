"""The marker the sharding tests share: skip where torch.distributed with gloo is missing."""
import pytest


def gloo_available() -> bool:
    """Whether torch.distributed with the gloo backend is available (the sharding tests spawn gloo groups)."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


#: skip a test that spawns a gloo process group where torch.distributed or gloo is missing
needs_gloo = pytest.mark.skipif(not gloo_available(), reason="torch.distributed with gloo is unavailable")
