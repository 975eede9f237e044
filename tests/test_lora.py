"""LoRA on a model file (``<stem>__lora``): rank-r adapters beside every nn.Linear, the base frozen.

Its reference is the adapted model computed plainly; the adapters' B starts at zero, so it computes
what the base model computes.  Exact CPU allocation bytes, in-process, tiny sizes.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import memlab
from memlab.core.errors import TechniqueUnavailable
from memlab.own_model import load_model, measure_model, model_techniques
from memlab.own_model.lora import LoRALinear, adapter_parameters, add_adapters

pytestmark = pytest.mark.usefixtures("frozen_heap")  # in-process measurements (conftest.frozen_heap)

CPU = torch.device("cpu")
CHAIN = Path(__file__).parent / "models" / "chain_blocks.py"
D, N = 32, 8  # chain_blocks: N blocks of nn.Linear(D, D)
STEP = 4      # Adam's step counter per parameter: a float32 0-d tensor
QUICK = {"isolate": False, "iterations": 2, "repeats": 1, "time_budget": 0}


def _problem(kind, rank=None):
    load_model(CHAIN)
    cls = memlab.get_technique(model_techniques(CHAIN)[kind])
    t = cls(batch=4, **({} if rank is None else {"rank": rank}))
    return t, t.build(CPU, torch.float64, 0)


def test_the_adapted_model_computes_the_base_model_s_loss_and_trains_only_the_adapters():
    plain_t, plain = _problem("plain")
    lora_t, lora = _problem("lora", rank=4)
    assert torch.equal(lora_t.reference(lora), plain_t.reference(plain))  # B = 0: the same loss, bit for bit
    adapters = adapter_parameters(lora.model)
    assert len(adapters) == 2 * N and lora.extra["lora_layers"] == [f"blocks.{i}.linear" for i in range(N)]
    assert {id(p) for p in lora.leaves()} == {id(p) for p in adapters}
    assert {tuple(p.shape) for p in adapters} == {(4, D), (D, 4)}
    assert not any(p.requires_grad for n, p in lora.model.named_parameters() if "lora_" not in n)


def test_gradients_and_optimizer_state_are_the_adapters_to_the_byte():
    """Adam, gradients kept between steps (``grads="zero"``): after the step the gradients are the
    adapters' bytes, the state their two moments and a step counter each; the parameters are the base
    and the adapters."""
    rank = 8
    m = measure_model(CHAIN, "lora", batch=16, rank=rank, optimizer="adam", grads="zero", **QUICK)
    assert m.status == "ok", m.error
    adapter_bytes = N * rank * (D + D) * 4
    base_bytes = N * (D * D + D) * 4
    assert m.extra["adapter_bytes"] == adapter_bytes and m.extra["lora_layers"] == N
    end = m.end_by_category_bytes
    assert end["gradients"] == m.grad_bytes == adapter_bytes
    assert end["optimizer_state"] == 2 * adapter_bytes + STEP * 2 * N
    assert end["parameters"] == m.param_bytes == base_bytes + adapter_bytes
    plain = measure_model(CHAIN, "plain", batch=16, optimizer="adam", grads="zero", **QUICK)
    assert plain.end_by_category_bytes["gradients"] == base_bytes  # what LoRA does not keep


def test_a_step_moves_the_adapters_and_leaves_the_base_as_it_was():
    t, problem = _problem("lora", rank=2)
    from memlab.measurement.step import make_step

    base = {n: p.detach().clone() for n, p in problem.model.named_parameters() if "lora_" not in n}
    step, _ = make_step(t, problem, "train", optimizer="adam")
    step()
    step()
    after = dict(problem.model.named_parameters())
    assert all(torch.equal(after[n], v) for n, v in base.items())
    assert all(after[n].abs().max() > 0 for n in after if n.endswith("lora_b"))  # B left zero


def test_rank_is_validated():
    load_model(CHAIN)
    with pytest.raises(ValueError, match=r"rank"):
        measure_model(CHAIN, "lora", batch=4, rank=0, **QUICK)


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.shared = nn.Linear(8, 8)
        self.head = nn.Sequential(self.shared, nn.Tanh(), self.shared)

    def forward(self, x):
        return self.head(self.attn(x, x, x, need_weights=False)[0])


def test_attention_s_own_projection_is_left_and_a_shared_layer_gets_one_adapter():
    model = _Attention()
    names = add_adapters(model, 2, seed=0)
    assert names == ["shared", "head.0", "head.2"]  # attn.out_proj: read by the attention directly, left frozen
    assert model.shared is model.head[0] is model.head[2] and isinstance(model.shared, LoRALinear)
    assert len(adapter_parameters(model)) == 2
    model(torch.randn(2, 3, 8)).sum().backward()  # still runs


def test_a_model_without_a_linear_layer_is_refused(tmp_path):
    path = tmp_path / "convs_only.py"
    path.write_text("import torch\nfrom torch import nn\n\ndef build():\n    return nn.Sequential(nn.Conv1d(2, 2, 3))\n\n"
                    "def batch(size):\n    return torch.randn(size, 2, 8)\n")
    with pytest.raises(TechniqueUnavailable, match=r"has no nn.Linear layer"):
        measure_model(path, "lora", batch=2, **QUICK)


class Conv1D(nn.Module):
    """transformers' GPT-2 projection, as memlab knows it (name and shape): ``x @ weight + bias``, weight [nx, nf]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], self.nf)


def test_gpt2_s_conv1d_projections_are_adapted_as_linear_layers():
    model = nn.Sequential(Conv1D(12, 8), nn.Tanh(), nn.Linear(12, 5))
    x = torch.randn(3, 8)
    before = model(x)
    assert add_adapters(model, 2, seed=0) == ["0", "2"]
    assert [tuple(p.shape) for p in adapter_parameters(model)] == [(2, 8), (12, 2), (2, 12), (5, 2)]
    assert torch.equal(model(x), before)
