"""Notebook 03's ``label_backward`` (its "Diagnose" cell, run as the notebook defines it) labels every module's
backward on any model, in-place ops and all: on torchvision's resnet34, densenet121, mobilenet_v2,
shufflenet_v2_x0_5 and squeezenet1_1, timm's regnetx_002 and a transformer (``nn.TransformerEncoder``) (random weights, small inputs, one step
each), every module call whose output needs a gradient has exactly one ``backward of <module>`` range in the
profiler's events per step, the ranges nest, and no hook is left on a parameter. The article's full backward hooks
(``label_full``, the cell before) fail on the same models; and the ranges hold the module's own backward nodes."""

from __future__ import annotations

import collections
import json
import warnings
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.autograd.graph import register_multi_grad_hook
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile
from torch.utils._pytree import tree_leaves

from helpers.lessons import backward_hooks as hooks

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_backward_hooks.ipynb"


def cell(containing: str) -> str:
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    found = ["".join(c["source"]) for c in cells if containing in "".join(c["source"])]
    assert len(found) == 1, f"{len(found)} code cells hold {containing!r}"
    return found[0]


def definitions(containing: str, names: tuple[str, ...]) -> dict:
    """The functions ``names`` as the notebook's cell defines them (its other statements are not run)."""
    import ast

    tree = ast.parse(cell(containing))
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    ns = {
        "torch": torch,
        "nn": nn,
        "hooks": hooks,
        "partial": partial,
        "record_function": record_function,
        "register_multi_grad_hook": register_multi_grad_hook,
        "tree_leaves": tree_leaves,
    }
    exec(compile(ast.Module(body, []), str(NOTEBOOK), "exec"), ns)  # noqa: S102
    assert all(n in ns for n in names), names
    return ns


LABELS = definitions("def label_backward(", ("needs_grad", "label_backward"))
label_backward = LABELS["label_backward"]
label_full = definitions("def label_full(", ("label_full",))["label_full"]


def torchvision_model(name):
    import torchvision

    return getattr(torchvision.models, name)(weights=None, num_classes=10)


def timm_model(name):
    timm = pytest.importorskip("timm", reason="timm is not installed")
    return timm.create_model(name, pretrained=False, num_classes=10)


def transformer():
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
    return nn.Sequential(
        nn.Flatten(2),  # (B, 3, 8·8): three tokens of width 64 -> a linear to 32
        nn.Linear(64, 32),
        nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
        nn.Flatten(),
        nn.Linear(3 * 32, 10),
    )


MODELS = {
    "resnet34": (partial(torchvision_model, "resnet34"), (2, 3, 64, 64)),
    "densenet121": (partial(torchvision_model, "densenet121"), (2, 3, 32, 32)),
    "mobilenet_v2": (partial(torchvision_model, "mobilenet_v2"), (2, 3, 32, 32)),
    "shufflenet_v2_x0_5": (partial(torchvision_model, "shufflenet_v2_x0_5"), (2, 3, 64, 64)),
    "squeezenet1_1": (partial(torchvision_model, "squeezenet1_1"), (2, 3, 64, 64)),
    "regnetx_002": (partial(timm_model, "regnetx_002"), (2, 3, 32, 32)),
    "transformer": (transformer, (2, 3, 8, 8)),
}


def expected_ranges(model, x) -> collections.Counter:
    """One range per call of each module whose output needs a gradient, named as the notebook names them."""
    names = {m: n or "model" for n, m in model.named_modules()}
    calls, out = collections.Counter(), collections.Counter()

    def count(m, args, output):
        if m in names and LABELS["needs_grad"](output):
            calls[names[m]] += 1
            k = calls[names[m]]
            out[hooks.PREFIX + names[m] + (f" #{k}" if k > 1 else "")] += 1

    h = nn.modules.module.register_module_forward_hook(count)
    try:
        model(x)
    finally:
        h.remove()
    return out


def labelled_step(model, x, label):
    loss_fn = nn.CrossEntropyLoss()
    handles = label(model) + label(loss_fn, root="loss")
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            loss = loss_fn(model(x), torch.zeros(x.shape[0], dtype=torch.long))
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    return prof


@pytest.mark.parametrize("name", list(MODELS))
def test_label_backward_gives_each_module_call_one_range_per_step(name):
    torch.manual_seed(0)
    make, shape = MODELS[name]
    model = make().train()
    x = torch.randn(*shape)
    expected = expected_ranges(model, x) + collections.Counter({hooks.PREFIX + "loss": 1})
    prof = labelled_step(model, x, label_backward)
    events = [e for e in prof.events() if e.name.startswith(hooks.PREFIX)]
    found = collections.Counter(e.name for e in events)
    assert found == expected, {
        "missing": sorted(set(expected) - set(found))[:5],
        "extra": sorted(set(found) - set(expected))[:5],
        "twice": sorted(k for k, v in found.items() if v > 1)[:5],
    }
    assert len(found) > 20 or name == "transformer"
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    crossing = [
        (a, b) for (a, b), (c, d) in zip(spans, spans[1:]) if a <= c < b < d
    ]  # ranges nest: one that starts inside another ends inside it
    assert not crossing, crossing[:3]
    assert not any(p._backward_hooks for p in model.parameters()), "a hook left on a parameter"
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("name", ["resnet34", "mobilenet_v2", "squeezenet1_1"])
def test_the_articles_full_hooks_fail_on_the_same_models(name):
    torch.manual_seed(0)
    make, shape = MODELS[name]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        with pytest.raises(
            RuntimeError, match="BackwardHookFunction is a view and is being modified inplace"
        ):
            labelled_step(make().train(), torch.randn(*shape), label_full)


def test_a_range_holds_its_modules_backward_nodes():
    """A Linear's range holds its backward's matrix products; a ReLU(inplace=True)'s its threshold_backward and no
    product; an Identity's is empty; the model's holds them all."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Identity(), nn.Linear(8, 2))
    handles = label_backward(model)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(torch.randn(3, 4)).sum().backward()
    finally:
        for h in handles:
            h.remove()
    ranges = {
        e.name[len(hooks.PREFIX) :]: e.time_range
        for e in prof.events()
        if e.name.startswith(hooks.PREFIX)
    }
    ops = [e for e in prof.events() if e.name.startswith("aten::")]

    def inside(name):
        r = ranges[name]
        return {e.name for e in ops if r.start <= e.time_range.start and e.time_range.end <= r.end}

    assert set(ranges) == {"model", "0", "1", "2", "3"}
    assert "aten::threshold_backward" in inside("1") and "aten::mm" not in inside("1")
    assert "aten::mm" in inside("0") and "aten::threshold_backward" not in inside("0")
    assert not inside("2") and {"aten::mm", "aten::threshold_backward"} <= inside("model")
    assert model[0].weight.grad is not None
