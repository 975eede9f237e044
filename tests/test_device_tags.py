"""Device tags on the CPU trace (NOTE [ device tags ]), the device view the CUDA replay uses
(NOTE [ device view ]) and the cuDNN calibration table (NOTE [ calibration table ])."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.utils.checkpoint as cp

import memlab
from memlab.cuda_replay.calibration import (TABLE_FORMAT, CalibrationTable, conv_error_range, load_table, signature_key,
                                     table_from_dict)
from memlab.cuda_replay.prediction import predict_cuda, rounded_replay_peak
from memlab.measurement.alloc_trace import AllocEvent, Window, iteration_stats, trace_allocations
from memlab.measurement.host_tags import rng_state_bytes, tag_events

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

KiB = 1024
MiB = 1024 * 1024
CPU = torch.device("cpu")
NO_TABLE = CalibrationTable("", {})
ENV = {"gpu": "Fake GPU", "torch": "2.13.0", "cuda": "13.0", "cudnn": 91002, "tf32": True}


def _trace(fn):
    return trace_allocations(fn, CPU, 1)


def _as_device(events):
    """The same trace with every tag removed: what the replay did before device tags."""
    return [dataclasses.replace(e, place="device", rule="") for e in events]


def _tagged(events, rule):
    return [e for e in events if e.rule == rule and e.delta_bytes > 0]


# -- host: RNG states -------------------------------------------------------------------------------

@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_rng_states_are_host_memory(reentrant):
    torch.manual_seed(0)
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(128, 64, requires_grad=reentrant)

    def step():
        out = torch.cat([cp.checkpoint(lambda c: torch.relu(c @ w) @ w, c, use_reentrant=reentrant)
                         for c in x.split(32)])
        out.sum().backward()

    events, windows = _trace(step)
    rng = _tagged(events, "rng_state")
    # one torch.get_rng_state() per checkpoint in forward, one per recomputation (fork_rng) in backward
    assert len(rng) == 8 and {e.delta_bytes for e in rng} == {rng_state_bytes()} == {5056}
    assert all(e.place == "host" for e in events if e.rule == "rng_state")
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    before = predict_cuda(_as_device(events), windows, calibration=NO_TABLE, with_history=False)
    # each state took a 5,120-byte block of a small segment; the device peak is that much lower
    saved = before["allocated_peak_bytes"] - p["allocated_peak_bytes"]
    assert saved > 0 and saved % 5120 == 0
    assert p["host_bytes"] == saved // 5120 * 5056
    assert p["device_tags"]["rng_state"] == {"place": "host", "allocations": 8, "bytes": 8 * 5056}
    assert p["cpu_peak_bytes"] == iteration_stats(events, windows).peaks[0]   # the CPU figure keeps them


# -- host: CPU scalars ------------------------------------------------------------------------------

def test_optimizer_step_counters_and_python_scalars_stay_on_the_host():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    opt = torch.optim.Adam(lin.parameters(), foreach=False)
    x = torch.randn(32, 64)

    def step():
        lin(x).sum().backward()
        opt.step()
        opt.zero_grad()

    events, windows = _trace(step)
    counters = _tagged(events, "optimizer_step_count")
    assert [e.delta_bytes for e in counters] == [4, 4]            # torch.tensor(0.0): one per parameter
    assert all(e.stack[-2] == "Optimizer.step#Adam.step" for e in counters)
    assert _tagged(events, "python_scalar") and all(e.delta_bytes <= 8 for e in _tagged(events, "python_scalar"))
    casts = _tagged(events, "scalar_cast")   # step_t += 1: the wrapped int cast to float on CPU only
    assert casts and all(e.place == "cpu_only" and e.stack[-3] == "aten::to" for e in casts)
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    assert p["host_peak_bytes"] >= 8 and p["host_bytes"] >= 8    # the two counters outlive the step


def test_host_memory_marks_what_a_technique_keeps_on_the_host():
    def step():
        with memlab.host_memory():
            staging = torch.empty(MiB, dtype=torch.uint8)
        work = torch.empty(256 * KiB, dtype=torch.uint8)
        del staging, work

    events, windows = _trace(step)
    assert [(e.delta_bytes, e.place, e.rule) for e in events if e.delta_bytes > 0] == \
        [(MiB, "host", "marked_host"), (256 * KiB, "device", "")]
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    assert p["allocated_peak_bytes"] == 256 * KiB
    assert p["host_bytes"] == MiB == p["host_peak_bytes"]
    assert p["cpu_peak_bytes"] == MiB + 256 * KiB


# -- host: save_on_cpu ------------------------------------------------------------------------------

def _offload_step(offload):
    torch.manual_seed(0)
    ws = [torch.randn(256, 256, requires_grad=True) for _ in range(4)]
    x = torch.randn(1024, 256)

    def step():
        with offload():
            h = x
            for w in ws:
                h = torch.tanh(h @ w)   # tanh saves its 1 MiB output
        h.sum().backward()
        for w in ws:
            w.grad = None
    return step


@pytest.mark.parametrize("pin", [False, True])
def test_save_on_cpu_moves_saved_activations_to_the_host(pin):
    import contextlib

    plain = _trace(_offload_step(contextlib.nullcontext))
    events, windows = _trace(_offload_step(lambda: torch.autograd.graph.save_on_cpu(pin_memory=pin)))
    p_plain = predict_cuda(*plain, calibration=NO_TABLE, with_history=False)
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    # on a GPU the saved tanh outputs wait on the host; backward copies each back for its node
    assert p["added_terms"]["device_copy"]["count"] >= 4
    assert p["allocated_peak_bytes"] < p_plain["allocated_peak_bytes"]
    assert p["host_peak_bytes"] >= 4 * MiB
    if pin:   # the pack hook's copies are host memory; the originals are freed by forward
        assert len(_tagged(events, "marked_host")) >= 4 and "offload" not in p["added_terms"]
    else:     # no copy on a CPU: the saved storage itself becomes host memory at the pack
        assert p["added_terms"]["offload"]["count"] >= 4
    assert torch.autograd.graph.save_on_cpu.__init__.__qualname__.startswith("save_on_cpu")   # restored


# -- cpu_only: oneDNN scratch -----------------------------------------------------------------------

def _conv_trace():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    x = torch.randn(4, 16, 32, 32, requires_grad=True)

    def step():
        conv(x).sum().backward()
        x.grad = None
        conv.zero_grad(set_to_none=True)
    return _trace(step)


def test_onednn_scratch_is_left_out_of_the_device_replay():
    events, windows = _conv_trace()
    scratch = _tagged(events, "onednn_scratch")
    # forward: input and weight reordered to blocked layouts, the blocked output (then copied out)
    assert {e.op for e in scratch} == {"aten::mkldnn_convolution", "aten::convolution_backward"}
    assert 16 * 32 * 9 * 4 in {e.delta_bytes for e in scratch}    # the 18,432-byte weight reorder
    outputs = [e for e in events if e.delta_bytes > 0 and e.op == "aten::empty"
               and "aten::mkldnn_convolution" in e.stack]
    assert [e.place for e in outputs] == ["device"] and outputs[0].delta_bytes == 4 * 32 * 32 * 32 * 4
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    before = predict_cuda(_as_device(events), windows, calibration=NO_TABLE, with_history=False)
    assert p["allocated_peak_bytes"] < before["allocated_peak_bytes"]
    assert p["allocated_peak_bytes"] == rounded_replay_peak(events, windows, calibration=NO_TABLE)
    assert p["device_tags"]["onednn_scratch"]["place"] == "cpu_only"


def test_scratch_that_outlives_its_operator_is_device_memory():
    def ev(t, d, ptr, stack, ends):
        return AllocEvent(t, d, stack[-1], stack, ptr, stack_end_ns=ends)
    conv = ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution")
    ends = (100, 100, 100, 50)
    tagged = tag_events([ev(10, 4096, 1, conv, ends), ev(20, 512, 2, conv, ends), ev(40, -4096, 1, conv, ends),
                         ev(60, -512, 2, ("?",), ())], rng=5056)
    assert [(e.place, e.rule) for e in tagged] == [("cpu_only", "onednn_scratch"), ("device", ""),
                                                   ("cpu_only", "onednn_scratch"), ("device", "")]


# -- the calibration table and `uncalibrated` -------------------------------------------------------

def _table(signatures, workspace):
    return {"format": TABLE_FORMAT, "environment": dict(ENV),
            "entries": [{**s, "workspace_bytes": workspace} for s in signatures]}


def test_uncalibrated_until_the_table_has_every_convolution_signature():
    events, windows = _conv_trace()
    sigs = [json.loads(w.detail) for w in windows if w.name == "conv"]
    assert [s["op"] for s in sigs] == ["aten::convolution", "aten::convolution_backward"]
    assert sigs[0]["input"] == [4, 16, 32, 32] and sigs[0]["padding"] == [1, 1] and sigs[0]["layout"] == "contiguous"
    none = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    assert none["status"] == "uncalibrated" and none["calibration"]["missing"] == 2
    family = none["calibration"]["family_error"]
    assert family == conv_error_range() and family["min_pct"] < 0 < family["max_pct"]
    half = predict_cuda(events, windows, calibration=table_from_dict(_table(sigs[:1], MiB)), with_history=False)
    assert half["status"] == "uncalibrated" and half["calibration"]["calibrated"] == 1
    full = predict_cuda(events, windows, calibration=table_from_dict(_table(sigs, MiB)), with_history=False)
    assert full["status"] == "ok" and "family_error" not in full["calibration"]
    assert full["added_terms"]["cudnn_workspace"] == {"count": 2, "bytes": 2 * MiB}
    assert full["allocated_peak_bytes"] > none["allocated_peak_bytes"]


def test_calibrated_workspace_replaces_the_cpu_kernels_temporaries_by_hand():
    sig = {"op": "aten::convolution", "input": [1, 1, 4, 4], "weight": [1, 1, 3, 3], "bias": False,
           "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "transposed": False, "output_padding": [0, 0],
           "groups": 1, "dtype": "float32", "layout": "contiguous"}
    events = [AllocEvent(21, 1000, "aten::empty", ("aten::empty",), 1),      # the output, kept
              AllocEvent(22, 4096, "aten::clone", ("aten::clone",), 2),      # a temporary inside the call
              AllocEvent(25, -4096, "aten::clone", ("aten::clone",), 2),
              AllocEvent(90, -1000, "?", (), 1)]
    windows = [Window("iteration0", 10, 100), Window("conv", 20, 30, json.dumps(sig))]
    plain = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    assert plain["allocated_peak_bytes"] == 1024 + 4096 and plain["status"] == "uncalibrated"
    table = table_from_dict(_table([sig], 3 * MiB))
    p = predict_cuda(events, windows, calibration=table, with_history=False)
    # the 4 KiB temporary is dropped; 3 MiB of workspace sits beside the output until the call returns
    assert p["allocated_peak_bytes"] == 1024 + 3 * MiB and p["status"] == "ok"
    assert p["reserved_peak_bytes"] == 2 * MiB + 20 * MiB


@pytest.mark.parametrize("mutate, match", [
    (lambda t: t.update(format="other/1"), r"fake.json: format = 'other/1' is not valid; valid: "
                                           r"'memlab.cuda_calibration/1'"),
    (lambda t: t["environment"].pop("cudnn"), r"fake.json: environment.cudnn = None is not valid; valid: an integer"),
    (lambda t: t["entries"][0].update(workspace_bytes=-1),
     r"fake.json: entries\[0\].workspace_bytes = -1 is not valid; valid: an integer >= 0 \(bytes\)"),
    (lambda t: t["entries"][0].update(op="aten::mm"), r"entries\[0\].op = 'aten::mm' is not valid"),
    (lambda t: t["entries"][0].update(stride="1"),
     r"entries\[0\].stride = '1' is not valid; valid: a list of integers"),
    (lambda t: t["entries"].append(dict(t["entries"][0])), r"entries\[1\] = 'a repeated signature'"),
])
def test_table_loader_names_the_file_and_the_field(tmp_path, mutate, match):
    sig = json.loads(next(w.detail for w in _conv_trace()[1] if w.name == "conv"))
    data = _table([sig], 0)
    mutate(data)
    path = tmp_path / "fake.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match) as info:
        load_table(path)
    assert "\n" not in str(info.value)


def test_table_round_trip_and_lookup(tmp_path):
    sig = json.loads(next(w.detail for w in _conv_trace()[1] if w.name == "conv"))
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_table([sig], 12345)))
    table = load_table(path)
    assert table.lookup(sig)["workspace_bytes"] == 12345
    assert table.lookup({**sig, "stride": [2, 2]}) is None
    assert table.lookup({"op": "aten::convolution", "incomplete": True}) is None
    assert signature_key(sig) == signature_key(dict(reversed(list(sig.items()))))
    with pytest.raises(ValueError, match="not a readable calibration table"):
        load_table(tmp_path / "missing.json")


# -- the device view by hand ------------------------------------------------------------------------

def test_offload_and_device_copy_by_hand():
    events = [AllocEvent(11, 3 * MiB, "aten::tanh", ("aten::tanh",), 7),
              AllocEvent(60, -3 * MiB, "?", (), 7)]
    windows = [Window("iteration0", 10, 100), Window("offload:7", 20, 20),
               Window("device_copy:3145728", 40, 45)]
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    # device: 3 MiB from 11 to 20, again from 40 to 45; host: 3 MiB from 20 to 60
    assert p["allocated_peak_bytes"] == 3 * MiB and p["allocated_end_above_baseline_bytes"] == 0
    assert p["host_peak_bytes"] == 3 * MiB
    assert p["added_terms"] == {"offload": {"count": 1, "bytes": 3 * MiB},
                                "device_copy": {"count": 1, "bytes": 3 * MiB}}
    assert p["unpaired_frees"] == 0


# -- the recorder's markers change nothing that is measured -------------------------------------------

def test_markers_leave_the_cpu_figures_alone(monkeypatch):
    import contextlib

    from memlab.measurement import alloc_trace

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    x = torch.randn(2, 8, 16, 16, requires_grad=True)

    def step():
        with torch.autograd.graph.save_on_cpu():
            y = torch.relu(conv(x))
        y.sum().backward()
        x.grad = None
        conv.zero_grad(set_to_none=True)

    marked = trace_allocations(step, CPU, 2)
    monkeypatch.setattr(alloc_trace, "marked_convolutions", contextlib.nullcontext)
    monkeypatch.setattr(alloc_trace, "marked_offloading", contextlib.nullcontext)
    plain = trace_allocations(step, CPU, 2)
    assert iteration_stats(*marked) == iteration_stats(*plain)
    assert [e.delta_bytes for e in marked[0]] == [e.delta_bytes for e in plain[0]]
    assert all(w.detail != "{}" for w in marked[1] if w.name == "conv")      # every signature known
    assert all(w.detail == "{}" for w in plain[1] if w.name == "conv")       # no markers: unknown


def test_every_convolution_of_a_checkpointed_resnet_has_its_signature():
    technique = memlab.get_technique("resnet_checkpoint_sqrt").for_check()
    from memlab.measurement.alloc_trace import trace_step

    events, windows = trace_step(technique)
    sigs = [json.loads(w.detail) for w in windows if w.name == "conv"]
    forward = [s for s in sigs if s["op"] == "aten::convolution"]
    backward = [s for s in sigs if s["op"] == "aten::convolution_backward"]
    assert forward and backward and all(s for s in sigs)
    # each backward is the transpose of a forward traced (the recomputation's included)
    shapes = {(tuple(s["input"]), tuple(s["weight"]), tuple(s["stride"])) for s in forward}
    assert all((tuple(s["input"]), tuple(s["weight"]), tuple(s["stride"])) in shapes for s in backward)
    p = predict_cuda(events, windows, calibration=NO_TABLE, with_history=False)
    assert p["status"] == "uncalibrated" and p["calibration"]["convolution_calls"] == len(sigs)


# -- the H200's measured bytes ---------------------------------------------------------------------

@pytest.mark.parametrize("technique, chunk_size", [("checkpoint_chunk", 1000), ("checkpoint_split_chunk", 2500)])
def test_checkpoint_rows_predict_the_h200_measured_bytes_exactly(technique, chunk_size):
    """data/gpu-check/nvidia-h200.json measured these on an H200; the prediction of that run replayed
    the saved RNG states as device memory (+8 x 5,120 and +1 x 5,120 bytes)."""
    from memlab.cuda_replay.calibration import GPU_CHECK_FILE
    from memlab.cuda.gpu_check import predict

    rows = json.loads(GPU_CHECK_FILE.read_text())["rows"]
    row = next(r for r in rows if r["technique"] == technique and r["params"].get("chunk_size") == chunk_size
               and r["params"].get("n") == 10000)
    cfg = {k: row[k] for k in ("technique", "params", "mode", "optimizer")}
    cpu = predict(cfg)
    assert cpu["predicted_allocated_bytes"] == row["measured_allocated_bytes"]
    states = cpu["predicted_host_bytes"] // 5056   # RNG states live at the device peak
    assert row["predicted_allocated_bytes"] - row["measured_allocated_bytes"] == states * 5120
    assert cpu["predicted_status"] == "ok"
