"""Reproduction of ``shared/seeds/reversible-memory-accounting.txt`` (MemCNN issue thread).

The user trained MemCNN's ResNet32 and RevNet38 on CIFAR-100 (``python -m memcnn.train resnet32
cifar100``; MemCNN's ``experiments.json``: batch 100, SGD with momentum 0.9, 100 classes) and saw
MemCNN's own figures, "Model memory" 1,966,080 vs 2,414,592 bytes and "ActMem" 259,687,424 vs
106,352,640 bytes (RevNet keeps 2.44x less), while nvidia-smi showed 712 vs 810 MiB.  Later posts
report allocated memory after ``optimizer.step()`` growing across iterations (fixed in MemCNN 1.3.1).
The maintainers' answer: the saving is in the activations, which totals (weights, gradients, the
allocator's cache, the CUDA context) hide.  Here, on CPU with exact allocated bytes:

* the report's configuration (full mode): memlab's ``resnet`` depth 32 and ``revnet`` depth 38
  (basic blocks, width 16, 32x32 inputs, 100 classes, batch 100, SGD with momentum), each with
  its parameter bytes (beside "Model memory"), activation peak (``extra["activation_peak_bytes"]``,
  beside "ActMem"), total step peak, ``allocated_after_step_bytes`` over 10 steps, and the CUDA
  caching allocator replayed on the step's exact trace (``predicted_cuda``: allocated vs reserved,
  the part of nvidia-smi's figure the allocator makes);
* when MemCNN (1.5.2, ``--no-deps``) is importable, MemCNN's own ResNet32/RevNet38 rebuilt from its
  ``experiments.json``: their parameters and buffers rounded to the CUDA allocator's 512 bytes (what
  ``torch.cuda.memory_allocated()`` counts as "Model memory") and the bytes their forward saves for
  backward (a saved-tensor hook, not a memlab measurement);
* a ``residual_stack`` depth sweep (activation peak against depth for plain autograd, memlab's
  whole-stack reversible Function and, when installed, MemCNN 1.5.2 and RevLib 1.7.2) at a moderate
  size, two steps each;
* ``allocated_after_step_bytes`` over 10 iterations for ``reversible``, and for a per-block Function
  with the classic ``ctx.y = y`` reference cycle (:class:`memlab.families.reversible.reproductions._leaky_ctx.LeakyCtxOutput`,
  measured in-process since it is deliberately not registered), which grows step after step.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

import memlab
from memlab.families.resnet.techniques import PlainResNet, RevNet
from memlab.reproductions.papers import mib, ratio, table
from ._leaky_ctx import LeakyCtxOutput
from memlab.cuda_replay.model import round_size
from memlab.families.resnet.workload import ResNet

__all__ = ["SEED", "TITLE", "CLAIM", "REPORT", "reproduce", "memcnn_models"]

SEED = "reversible-memory-accounting"
TITLE = "Memory consumption does not seem to reflect the indicated consumption of nvidia-smi"
#: what this page settles (its title; TITLE, the report's own, is shown beneath)
SETTLES = "Reversible nets: where the savings go and whether memory leaks across steps"
CLAIM = ("Reversible blocks (MemCNN) showed no saving in nvidia-smi, and allocated memory after "
         "optimizer.step() grew across iterations.")

# NOTE [ the report's networks are the resnet family's ]
# The report compares a plain residual network with a reversible one: the resnet family's baseline
# and its RevNet, measured here beside this family's reversible stacks, MemCNN and the leaky stack.
# The module lives in the reversible folder (the report is about reversible memory), so it names only
# this family's techniques and takes the two networks' names from the resnet family's classes.
# Evidence: tests/test_family_names.py (no technique name outside its family's folder).
#: the report's two networks: the resnet family's plain network and its RevNet (technique names)
RESNET, REVNET = PlainResNet.name, RevNet.name

#: the report's figures (bytes; nvidia-smi in MiB), MemCNN 1.2.0, CIFAR-100, iteration 1100
REPORT = {RESNET: {"label": "ResNet32", "depth": 32, "memcnn": "resnet32", "model_bytes": 1_966_080,
                     "actmem_bytes": 259_687_424, "nvidia_smi_mib": 712},
          REVNET: {"label": "RevNet38", "depth": 38, "memcnn": "revnet38", "model_bytes": 2_414_592,
                     "actmem_bytes": 106_352_640, "nvidia_smi_mib": 810}}
#: the report's memory_reserved() - Model memory after backward, RevNet38, steps 0, 1, 2 (PyTorch 1.4, bytes)
REVNET_RESERVED_BYTES = (320_864_256, 350_224_384, 379_584_512)
REPORT_RATIO = REPORT[RESNET]["actmem_bytes"] / REPORT[REVNET]["actmem_bytes"]  # 2.44
#: MemCNN's experiments.json: resnet32's data_loader_params.batch_size (revnet38 inherits it)
MEMCNN_BATCH = 100
NETS = (RESNET, REVNET)


def _configs(quick: bool) -> dict[str, Any]:
    if quick:
        return {"nets": {"block": "basic", "width": 4, "image": 8, "classes": 10, "batch": 2}, "net_iterations": 3,
                "stack": {"batch": 64, "width": 64, "hidden": 128}, "depths": (4, 16), "stack_iterations": 2}
    return {"nets": {"block": "basic", "width": 16, "image": 32, "classes": 100, "batch": MEMCNN_BATCH},
            "net_iterations": 10, "stack": {"batch": 128, "width": 128, "hidden": 256}, "depths": (4, 16, 64),
            "stack_iterations": 2}


LEAK_CFG = {"depth": 8, "batch": 64, "width": 64, "hidden": 128}
LEAK_ITERATIONS = 10


def _rounded(tensors) -> int:
    """Bytes the CUDA caching allocator hands out for these tensors, one block each (an empty
    tensor allocates nothing)."""
    return sum(round_size(t.nbytes) for t in tensors if t.nbytes)


def memlab_model_bytes(name: str, cfg: dict[str, Any]) -> int:
    """memlab's network's parameters and buffers, each rounded up to 512 bytes (float32): what
    ``torch.cuda.memory_allocated()`` would show after building it on a GPU (MemCNN's "Model memory")."""
    w = ResNet({**cfg, "depth": REPORT[name]["depth"]})
    p = (w.build if name == RESNET else w.build_revnet)(torch.device("cpu"), torch.float32, 0)
    return _rounded([*p.model.parameters(), *p.model.buffers()])


def memcnn_models(classes: int = 100, batch: int | None = MEMCNN_BATCH) -> dict[str, dict[str, int]] | None:
    """MemCNN's own ResNet32 and RevNet38 (its ``experiments.json`` layouts), or None without MemCNN.

    Per network: ``param_bytes``; ``model_bytes``: parameters and buffers each rounded up to 512
    bytes, what MemCNN's trainer prints as "Model memory allocation" (``memory_allocated()`` after
    building the model on the GPU); with ``batch``: ``saved_bytes``, the distinct storages the
    forward and the loss save for backward (a ``saved_tensors_hooks`` count at the forward's end,
    parameters and storages MemCNN has freed left out), MemCNN's "ActMem" less the input, the
    gradients and momentum it also counts from the second iteration on.
    """
    try:
        from memcnn.models.resnet import BasicBlock, ResNet, RevBasicBlock  # deferred: optional dependency
    except Exception:  # noqa: BLE001 - not installed, or its import failed: the page says so
        return None
    layouts = {"resnet32": (BasicBlock, [5, 5, 5], [16, 16, 32, 64]),
               "revnet38": (RevBasicBlock, [3, 3, 3], [32, 32, 64, 112])}
    out = {}
    for name, (block, layers, chans) in layouts.items():
        torch.manual_seed(0)
        model = ResNet(block, layers=layers, num_classes=classes, channels_per_layer=chans, strides=[1, 1, 2, 2],
                       init_max_pool=False, init_kernel_size=3, batch_norm_fix=False)
        params = list(model.parameters())
        row = {"param_bytes": sum(p.numel() * p.element_size() for p in params),
               "model_bytes": _rounded([*params, *model.buffers()])}
        if batch:
            model.train()
            storages: dict[int, Any] = {}

            def pack(t):  # keyed by the storage itself (held here), not its address: MemCNN frees and reuses
                s = t.untyped_storage()
                storages.setdefault(s._cdata, s)
                return t

            x = torch.randn(batch, 3, 32, 32)
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = torch.nn.functional.cross_entropy(model(x), torch.zeros(batch, dtype=torch.long))
            own = {p.untyped_storage()._cdata for p in params} | {x.untyped_storage()._cdata}
            row["saved_bytes"] = sum(s.nbytes() for key, s in storages.items() if key not in own)
            del loss, storages
        out[name] = row
    return out


def reproduce(quick: bool = False) -> dict[str, Any]:
    c = _configs(quick)
    nets = {name: memlab.measure(name, depth=REPORT[name]["depth"], optimizer="sgd_momentum",
                                 iterations=c["net_iterations"], repeats=1, time_budget=1.0, timeout=3600, **c["nets"])
            for name in NETS}
    model_bytes = {name: memlab_model_bytes(name, c["nets"]) for name in NETS}
    memcnn = memcnn_models(c["nets"]["classes"], c["nets"]["batch"])

    names = [n for n in ("residual", "reversible", "memcnn", "revlib") if n in memlab.list_techniques()]
    rows: dict[str, dict[int, Any]] = {}
    for name in names:
        for depth in c["depths"]:
            try:
                m = memlab.measure(name, iterations=c["stack_iterations"], repeats=1, time_budget=1.0, timeout=3600,
                                   depth=depth, **c["stack"])
            except memlab.TechniqueUnavailable:
                break
            rows.setdefault(name, {})[depth] = m
    leaky = memlab.measure(LeakyCtxOutput, isolate=False, iterations=LEAK_ITERATIONS, repeats=1, **LEAK_CFG)
    clean = memlab.measure("reversible", iterations=LEAK_ITERATIONS, repeats=1, **LEAK_CFG)
    return report(nets, model_bytes, memcnn, rows, leaky, clean, quick)


def _ok(m) -> bool:
    return m is not None and m.status == "ok"


def _cuda(m, listed: tuple[str, ...] = ("ok",)) -> dict[str, float | None]:
    """Predicted CUDA (the caching allocator replayed on the step's exact trace), MiB: allocated peak
    above the baseline (``allocated_peak_mib``) and in all (``allocated_peak_total_mib``), reserved
    peak on a cache holding only the baseline (``reserved_peak_mib``) and in a process whose warm-up
    step already filled the cache (``reserved_steady_mib``: the allocator's part of nvidia-smi)."""
    p = (m.predicted_cuda or {}) if m is not None and m.status in listed else {}
    h = p.get("with_history") or {}
    return {"allocated_peak_mib": mib(p.get("allocated_peak_bytes"), 1),
            "allocated_peak_total_mib": mib(p.get("allocated_peak_total_bytes"), 1),
            "reserved_peak_mib": mib(p.get("reserved_peak_bytes"), 1),
            "reserved_steady_mib": mib(h.get("reserved_peak_bytes"), 1)}


def _growth(m) -> int | None:
    a = m.allocated_after_step_bytes or []
    return (max(a) - min(a)) if a else None


# the sweep's figures are memory, listed (never ranked) for a row whose only fault is a wrong value:
# MemCNN 1.5.2 doubles a leaf input's gradient (NOTE [ MemCNN 1.5.2 input gradient ]), its memory is real
def _listed(m) -> bool:
    return m is not None and m.status in ("ok", "mismatch")


def _fmt(b) -> str:
    return "-" if b is None else f"{b:,}"


@dataclasses.dataclass(frozen=True)
class _Figures:
    """The numbers the page states, computed once from the measurements :func:`reproduce` took.

    ``nets``: the report's networks by name (``resnet``, ``revnet``), ``rows``: the depth sweep's
    measurements by technique and depth, ``leaky``/``clean``: the leak demonstration; ``act``/``tot``:
    activation and total step peaks by network (bytes, None unless ok), ``cud``: predicted CUDA by
    network (MiB, :func:`_cuda`), ``growth``: allocated-after-step spread by network (bytes),
    ``per_step``: the leaky Function's growth per step (bytes), ``out_bytes``: one block's output
    (bytes), ``scale``: MemCNN's batch over ours.
    """

    quick: bool
    c: dict[str, Any]
    nets: dict[str, Any]
    model_bytes: dict[str, int]
    memcnn: dict[str, dict[str, int]] | None
    rows: dict[str, dict[int, Any]]
    leaky: Any
    clean: Any
    act: dict[str, int | None]
    tot: dict[str, int | None]
    cud: dict[str, dict[str, float | None]]
    growth: dict[str, int | None]
    per_step: float
    out_bytes: int

    @property
    def cfg(self) -> dict[str, Any]:
        return self.c["nets"]

    @property
    def act_ratio(self) -> float | None:
        return ratio(self.act[RESNET], self.act[REVNET])

    @property
    def res_ratio(self) -> float | None:
        return ratio(self.cud[RESNET]["reserved_steady_mib"], self.cud[REVNET]["reserved_steady_mib"])

    @property
    def scale(self) -> float:
        return MEMCNN_BATCH / self.cfg["batch"]

    def stack_act(self, name: str, d: int) -> float | None:
        m = self.rows.get(name, {}).get(d)
        return mib(m.extra.get("activation_peak_bytes")) if _listed(m) else None

    def stack_total(self, name: str, d: int) -> float | None:
        m = self.rows.get(name, {}).get(d)
        return mib(m.peak_allocated_bytes) if _listed(m) else None

    def stack_status(self, name: str) -> str:
        bad = sorted({m.status for m in self.rows.get(name, {}).values()} - {"ok"})
        return "ok" if not bad else "/".join(bad)

    def stack_label(self, name: str) -> str:
        st = self.stack_status(name)
        why = ": it doubles the input's gradient" if name == "memcnn" and st == "mismatch" else ""
        return name if st == "ok" else f"{name} (status {st}{why})"

    def predicted(self, key: str, hist: bool = False) -> Callable[[str], int | None]:
        """Network name -> its ``predicted_cuda[key]`` (bytes; the warm-cache figure with ``hist``)."""
        def get(n):
            p = (self.nets[n].predicted_cuda or {}) if _ok(self.nets[n]) else {}
            return (p.get("with_history") or {}).get(key) if hist else p.get(key)
        return get


def figures(nets, model_bytes, memcnn, rows, leaky, clean, quick: bool = False) -> _Figures:
    """The numbers of the page (computation only; :func:`report` writes them out)."""
    return _Figures(
        quick=quick, c=_configs(quick), nets=nets, model_bytes=model_bytes, memcnn=memcnn, rows=rows, leaky=leaky,
        clean=clean, act={n: (m.extra.get("activation_peak_bytes") if _ok(m) else None) for n, m in nets.items()},
        tot={n: (m.total_peak_bytes if _ok(m) else None) for n, m in nets.items()},
        cud={n: _cuda(m) for n, m in nets.items()}, growth={n: _growth(m) for n, m in nets.items()},
        per_step=(leaky.allocated_after_step_bytes[-1] - leaky.allocated_after_step_bytes[0]) / (LEAK_ITERATIONS - 1),
        out_bytes=LEAK_CFG["batch"] * 2 * LEAK_CFG["width"] * 4)


def _memcnn_text(f: _Figures) -> str:
    """MemCNN's own networks rebuilt here, in one sentence ('' without MemCNN)."""
    if not f.memcnn:
        return ""
    cfg, memcnn = f.cfg, f.memcnn
    mb = (memcnn["resnet32"]["model_bytes"], memcnn["revnet38"]["model_bytes"])
    same = mb == (REPORT[RESNET]["model_bytes"], REPORT[REVNET]["model_bytes"])
    sv = (memcnn["resnet32"].get("saved_bytes"), memcnn["revnet38"].get("saved_bytes"))
    return (f" MemCNN's own ResNet32 / RevNet38 rebuilt here (MemCNN 1.5.2, its experiments.json layouts, "
            f"{cfg['classes']} classes) hold {_fmt(mb[0])} / {_fmt(mb[1])} bytes of parameters and buffers rounded "
            f"to the allocator's 512 bytes ({'exactly' if same else 'against'} the report's Model memory)"
            + (f", and their forward saves {mib(sv[0], 1)} / {mib(sv[1], 1)} MiB for backward at batch "
               f"{cfg['batch']} ({ratio(*sv)}x; a saved-tensor-hook count: the report's ActMem adds the input, "
               "gradients and momentum)" if None not in sv else "") + ".")


def _smi_text(f: _Figures) -> str:
    """What nvidia-smi shows: the allocator's reserved bytes + what lies outside it (CUDA context, cuDNN
    workspaces), the report's figures against the prediction."""
    rc, vc = f.cud[RESNET], f.cud[REVNET]
    rev_reserved = [mib(b + REPORT[REVNET]["model_bytes"], 0) for b in (REVNET_RESERVED_BYTES[0],
                                                                          REVNET_RESERVED_BYTES[-1])]
    outside_rev = [REPORT[REVNET]["nvidia_smi_mib"] - r for r in reversed(rev_reserved)]
    smi_text = (
        "nvidia-smi shows the reserved bytes, which the allocator keeps between steps, plus what lies outside the "
        "allocator: the CUDA context and cuDNN workspaces, which a CPU trace cannot see. The report's own "
        f"memory_reserved() for RevNet38 under MemCNN 1.2.0 and PyTorch 1.4 ({rev_reserved[0]:.0f}-"
        f"{rev_reserved[1]:.0f} MiB with "
        f"the model over its first steps, still growing) leaves {outside_rev[0]:.0f}-{outside_rev[1]:.0f} MiB of its "
        f"{REPORT[REVNET]['nvidia_smi_mib']} MiB outside the allocator")
    if not f.quick and rc["reserved_steady_mib"] is not None:
        outside_res = REPORT[RESNET]["nvidia_smi_mib"] - rc["reserved_steady_mib"]
        smi_text += (f"; ResNet32's {REPORT[RESNET]['nvidia_smi_mib']} MiB less its predicted "
                     f"{rc['reserved_steady_mib']:.0f} MiB reserved leaves {outside_res:.0f} MiB, the same fixed "
                     f"share. So on a GPU the reversible saving "
                     f"({rc['reserved_steady_mib'] - vc['reserved_steady_mib']:.0f} MiB of reserved memory here) "
                     f"would show in nvidia-smi on top of that fixed share, but MemCNN 1.2.0's RevNet38 reserved "
                     f"{rev_reserved[0]:.0f}-{rev_reserved[1]:.0f} MiB where memlab's reversible RevNet38 is "
                     f"predicted at {vc['reserved_steady_mib']:.0f} MiB: the behaviour MemCNN 1.3.1 fixed, by the "
                     "maintainer's account")
    return smi_text + "."


def _configuration_text(f: _Figures) -> str:
    c, cfg, depths = f.c, f.cfg, f.c["depths"]
    net_text = (f"memlab's resnet depth 32 vs revnet depth 38, basic blocks, width {cfg['width']}, "
                f"{cfg['image']}x{cfg['image']} inputs, {cfg['classes']} classes, batch {cfg['batch']}, "
                f"SGD with momentum, {c['net_iterations']} steps each")
    return (f"Claim: {CLAIM} Configuration: CPU, float32; the report's networks: {net_text}"
            + (" (quick mode: toy sizes)" if f.quick else " (MemCNN's experiments.json batch for resnet32 and "
               "revnet38 on CIFAR; memlab's RevNet38 has 32/64/128 channels per stage where MemCNN's has 32/64/112, its stage "
               "transitions plain residual blocks)")
            + f"; a residual_stack depth sweep (batch {c['stack']['batch']}, width {c['stack']['width']}, hidden "
            f"{c['stack']['hidden']}, depth {', '.join(map(str, depths))}, {c['stack_iterations']} steps each); and a "
            f"leak demonstration (depth {LEAK_CFG['depth']}, batch {LEAK_CFG['batch']}, width {LEAK_CFG['width']}, "
            f"{LEAK_ITERATIONS} steps).")


def _network_texts(f: _Figures) -> list[str]:
    """Parameters, activation peak, total step peak and predicted CUDA of the report's networks."""
    res, rev, act, tot, act_ratio = f.nets[RESNET], f.nets[REVNET], f.act, f.tot, f.act_ratio
    rc, vc, res_ratio = f.cud[RESNET], f.cud[REVNET], f.res_ratio
    keeps = ("the caching allocator keeps the saving: reserved memory is the allocated peak rounded up to its "
             "segments" if res_ratio is not None and act_ratio is not None and res_ratio >= 0.75 * act_ratio else
             "the caching allocator's rounding and cached segments hide part of the saving")
    return [
        f"Parameters: memlab ResNet32 {_fmt(res.param_bytes)} bytes, RevNet38 {_fmt(rev.param_bytes)} bytes "
        f"({_fmt(f.model_bytes[RESNET])} / {_fmt(f.model_bytes[REVNET])} with buffers, rounded to 512 bytes; the "
        f"report's Model memory: {_fmt(REPORT[RESNET]['model_bytes'])} / {_fmt(REPORT[REVNET]['model_bytes'])})."
        + _memcnn_text(f),
        f"Activation peak (saved activations and temporaries, exact): ResNet32 {mib(act[RESNET], 1)} MiB "
        f"({_fmt(act[RESNET])} bytes), RevNet38 {mib(act[REVNET], 1)} MiB ({_fmt(act[REVNET])} bytes): "
        f"{act_ratio}x less, beside the report's ActMem {_fmt(REPORT[RESNET]['actmem_bytes'])} / "
        f"{_fmt(REPORT[REVNET]['actmem_bytes'])} bytes ({REPORT_RATIO:.2f}x"
        + (f"; memlab's ratio is {100 * abs(act_ratio / REPORT_RATIO - 1):.0f}% "
           f"{'below' if act_ratio < REPORT_RATIO else 'above'} it" if act_ratio else "") + ")"
        + (f"; scaled to batch {MEMCNN_BATCH}: {mib(act[RESNET] and act[RESNET] * f.scale, 1)} / "
           f"{mib(act[REVNET] and act[REVNET] * f.scale, 1)} MiB" if f.scale != 1 else "") + ".",
        f"Total step peak (parameters, gradients, momentum, input and activations): ResNet32 {mib(tot[RESNET], 1)} "
        f"MiB vs RevNet38 {mib(tot[REVNET], 1)} MiB ({ratio(tot[RESNET], tot[REVNET])}x)"
        + (f"; activations are {100 * act[RESNET] / tot[RESNET]:.0f}% / {100 * act[REVNET] / tot[REVNET]:.0f}% "
           "of it" + (", so weights, gradients and momentum hide little of the saving at this size"
                      if min(act[n] / tot[n] for n in NETS) >= 0.75 else
                      ": weights, gradients and momentum hide part of the saving")
           if None not in (*act.values(), *tot.values()) else "") + ".",
        f"Predicted CUDA (the caching allocator replayed on each step's exact trace): allocated peak "
        f"{rc['allocated_peak_total_mib']} vs {vc['allocated_peak_total_mib']} MiB, reserved peak "
        f"{rc['reserved_peak_mib']} vs {vc['reserved_peak_mib']} MiB on a fresh cache and "
        f"{rc['reserved_steady_mib']} vs {vc['reserved_steady_mib']} MiB in a process whose warm-up step filled the "
        f"cache ({res_ratio}x): {keeps}.",
    ]


def _summary(f: _Figures) -> str:
    """The page's summary: claim and configuration, the networks, nvidia-smi, growth, the sweep, the leak."""
    c, rows = f.c, f.rows
    lo, hi = c["depths"][0], c["depths"][-1]
    res, rev, leaky = f.nets[RESNET], f.nets[REVNET], f.leaky
    parts = [
        _configuration_text(f), *_network_texts(f), _smi_text(f),
        f"Allocated after each step: ResNet32 varies by {f.growth[RESNET]} bytes, RevNet38 by "
        f"{f.growth[REVNET]} bytes over {c['net_iterations']} steps (status {res.status} / {rev.status}).",
        f"residual_stack activation peak (MiB) at depth {lo} -> {hi}: residual {f.stack_act('residual', lo)} -> "
        f"{f.stack_act('residual', hi)}, memlab reversible {f.stack_act('reversible', lo)} -> "
        f"{f.stack_act('reversible', hi)}"
        + "".join(f", {f.stack_label(n)} {f.stack_act(n, lo)} -> {f.stack_act(n, hi)}" for n in ("memcnn", "revlib")
                  if n in rows)
        + f"; total peak residual {f.stack_total('residual', hi)} vs reversible {f.stack_total('reversible', hi)} "
        f"MiB at depth {hi}: in this MLP stack the step's peak is at the end of backward, where parameter gradients, "
        "not activations, dominate.",
        f"Leak: reversible's after-step allocated bytes vary by {_growth(f.clean)} bytes over {LEAK_ITERATIONS} steps; "
        f"a per-block Function with ctx.y = y grows by {f.per_step:.0f} bytes per step on average (depth "
        f"{LEAK_CFG['depth']} x {f.out_bytes} bytes of block output per step, less whatever the garbage collector "
        f"happened to reclaim; status {leaky.status}).",
        "Caveat: CPU only (no nvidia-smi here; the CUDA figures are predicted, not measured, and leave out the "
        "context and workspaces); memlab's networks are its own (frozen-statistics norm, 1x1 projection shortcuts), "
        "so the ratio, not the bytes, is what compares; the growth is reproduced through its mechanism, not with "
        "MemCNN 1.2, and MemCNN 1.5.2 itself stays flat.",
        "Verdict: reproduced with caveat.",
    ]
    return " ".join(parts)


def _net_row(label: str, vals: list, report_key: str | None = None, digits: int = 2) -> list:
    """One row of the report table: the report's ResNet32, RevNet38 and ratio beside memlab's (MiB)."""
    rep = [REPORT[n][report_key] for n in NETS] if report_key else [None, None]
    rep_mib = rep if report_key == "nvidia_smi_mib" else [mib(v, digits) for v in rep]
    return [label, rep_mib[0], rep_mib[1], ratio(rep[0], rep[1]) if report_key else None,
            mib(vals[0], digits), mib(vals[1], digits), ratio(vals[0], vals[1])]


def _net_rows(f: _Figures) -> list[list]:
    def row(label, get, report_key=None, digits=2):
        return _net_row(label, [get(RESNET), get(REVNET)], report_key, digits)

    net_rows = [
        row("parameters (report: Model memory, params + buffers as allocated)", lambda n: f.nets[n].param_bytes,
            "model_bytes", 3),
        row("parameters + buffers, rounded to 512 B", lambda n: f.model_bytes[n], "model_bytes", 3),
        row("activation peak (report: ActMem)", lambda n: f.act[n], "actmem_bytes"),
        row("total step peak", lambda n: f.tot[n]),
        row("predicted CUDA allocated peak", f.predicted("allocated_peak_total_bytes")),
        row("predicted CUDA reserved peak, fresh cache", f.predicted("reserved_peak_bytes")),
        row("predicted CUDA reserved peak, warm cache (report: nvidia-smi, context included)",
            f.predicted("reserved_peak_bytes", hist=True), "nvidia_smi_mib"),
    ]
    memcnn = f.memcnn
    if memcnn:
        net_rows.insert(2, ["MemCNN's own networks: params + buffers, rounded to 512 B",
                            mib(REPORT[RESNET]["model_bytes"], 3), mib(REPORT[REVNET]["model_bytes"], 3),
                            ratio(REPORT[RESNET]["model_bytes"], REPORT[REVNET]["model_bytes"]),
                            mib(memcnn["resnet32"]["model_bytes"], 3), mib(memcnn["revnet38"]["model_bytes"], 3),
                            ratio(memcnn["resnet32"]["model_bytes"], memcnn["revnet38"]["model_bytes"])])
        if memcnn["resnet32"].get("saved_bytes") is not None:
            net_rows.insert(4, ["MemCNN's own networks: bytes saved for backward at the forward's end",
                                mib(REPORT[RESNET]["actmem_bytes"]), mib(REPORT[REVNET]["actmem_bytes"]),
                                round(REPORT_RATIO, 2), mib(memcnn["resnet32"]["saved_bytes"]),
                                mib(memcnn["revnet38"]["saved_bytes"]),
                                ratio(memcnn["resnet32"]["saved_bytes"], memcnn["revnet38"]["saved_bytes"])])
    return net_rows


def _tables(f: _Figures) -> list[dict[str, Any]]:
    """The report's figures beside memlab's, and the residual_stack depth sweep."""
    c, cfg, depths, rows = f.c, f.cfg, f.c["depths"], f.rows
    hi = depths[-1]
    report_table = table("report", "The report's figures beside memlab's (MiB)", [
        "quantity", "report ResNet32", "report RevNet38", "report ratio", "memlab ResNet32", "memlab RevNet38",
        "memlab ratio"], _net_rows(f),
        f"Report: MemCNN 1.2.0's trainer on a GPU (CIFAR-100, batch {MEMCNN_BATCH}); Model memory and ActMem are "
        "torch.cuda.memory_allocated() figures, nvidia-smi includes the CUDA context. memlab: CPU, float32, batch "
        f"{cfg['batch']}, exact allocation trace; predicted CUDA is the caching allocator replayed on it (context and "
        "workspaces not included). Ratios are ResNet32 / RevNet38.")
    sweep_table = table("depth", "residual_stack: activation peak and total peak (MiB) against depth", [
        "technique", "status", *[f"activation, depth {d}" for d in depths], f"total peak, depth {hi}",
        f"predicted CUDA reserved, depth {hi}"],
        [[n, f.stack_status(n), *[f.stack_act(n, d) for d in depths], f.stack_total(n, hi),
          _cuda(rows[n].get(hi), ("ok", "mismatch"))["reserved_peak_mib"]] for n in rows],
        f"CPU, float32, batch {c['stack']['batch']}, width {c['stack']['width']}, hidden {c['stack']['hidden']}, "
        f"{c['stack_iterations']} steps per point.")
    return [report_table, sweep_table]


def _figure(f: _Figures) -> dict[str, Any]:
    """The bar chart: memlab's networks (and, in full mode, the report's) by figure, MiB."""
    def bars(n):
        return [mib(f.nets[n].param_bytes), mib(f.act[n]), mib(f.tot[n]),
                mib(f.predicted("allocated_peak_total_bytes")(n)), mib(f.predicted("reserved_peak_bytes", True)(n))]

    x = ["parameters", "activation peak", "total step peak", "predicted CUDA allocated peak",
         "predicted CUDA reserved peak (warm cache)"]
    series = {"memlab ResNet32": bars(RESNET), "memlab RevNet38": bars(REVNET)}
    if not f.quick:
        series["report ResNet32"] = [mib(REPORT[RESNET]["model_bytes"]), mib(REPORT[RESNET]["actmem_bytes"]),
                                     None, None, None]
        series["report RevNet38"] = [mib(REPORT[REVNET]["model_bytes"]), mib(REPORT[REVNET]["actmem_bytes"]),
                                     None, None, None]
    return {"type": "bar", "title": "ResNet32 vs RevNet38 (the report's networks): where the saving shows",
            "x_label": "figure", "y_label": "MiB", "x": x, "series": series, "log_x": False, "log_y": False}


def report(nets, model_bytes, memcnn, rows, leaky, clean, quick: bool = False) -> dict[str, Any]:
    """The page's data from the measurements :func:`reproduce` took: :func:`figures` computes the
    numbers, the ``_summary``, ``_tables`` and ``_figure`` helpers write them out."""
    f = figures(nets, model_bytes, memcnn, rows, leaky, clean, quick)
    c = f.c
    measurements = [m.to_dict() for m in nets.values()]
    measurements += [m.to_dict() for r in rows.values() for m in r.values()]
    measurements += [leaky.to_dict(), clean.to_dict()]
    predicted = {f"{n} depth {REPORT[n]['depth']}": f.cud[n] for n in NETS}
    predicted.update({f"{n} depth {d}": _cuda(m, ("ok", "mismatch")) for n, r in rows.items() for d, m in r.items()})
    return {
        "verdict": "reproduced with caveat",
        "summary": _summary(f),
        "measurements": measurements,
        "timelines": [],
        "tables": _tables(f),
        "configuration": {
            "report_networks": {**f.cfg, "depths": {n: REPORT[n]["depth"] for n in NETS}, "optimizer": "sgd_momentum",
                                "iterations": c["net_iterations"]},
            "depth_sweep": {**c["stack"], "depths": list(c["depths"]), "iterations": c["stack_iterations"]},
            "leak": {**LEAK_CFG, "iterations": LEAK_ITERATIONS},
            "memcnn_models": memcnn, "memlab_model_bytes_rounded": model_bytes,
            "dtype": "float32", "device": "cpu"},
        "predicted_cuda": predicted,
        "figure": _figure(f),
    }
