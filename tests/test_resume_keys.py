"""--resume skips finished points measured the same way, and only those."""
import memlab
from memlab.sweep import already_measured
import pytest

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)


def test_resume_keys_follow_status_optimizer_and_loss(tmp_path):
    m = memlab.measure("unchunked", isolate=False, iterations=1, repeats=1, time_budget=0, n=16, d=4, hidden=8)
    path = tmp_path / "rows.jsonl"
    rows = [m, m.replace(technique="slice_loop", status="mismatch"), m.replace(technique="vmap_chunk", status="error"),
            m.replace(technique="einsum_chunk", optimizer="adam")]
    path.write_text("".join(r.to_json() + "\n" for r in rows))
    sgd = {name for name, _ in already_measured(path, "cpu", "float32", "train")}
    assert sgd == {"unchunked", "slice_loop"}          # an error row is measured again; adam is another point
    adam = {name for name, _ in already_measured(path, "cpu", "float32", "train", optimizer="adam")}
    assert adam == {"einsum_chunk"}
    assert already_measured(path, "cpu", "float32", "train", loss="mse") == set()
