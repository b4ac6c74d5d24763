"""helpers.lessons.backward_hooks: the indexing patch dropout and the views (notebook 03_backward_hooks)."""
import pytest
import torch
from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from helpers.lessons import backward_hooks as hooks
from helpers.lessons.backward_hooks import patch_dropout as pdm
from helpers.lessons.backward_hooks import views

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def label_backward(module, root="model"):
    """The notebook's technique (its 'Diagnose' cell): a range per module from full backward hooks."""
    ranges, handles = {}, []
    for name, m in module.named_modules():
        name = name or root

        def before(m, grad_output, name=name):
            ranges[name] = record_function(hooks.PREFIX + name)
            ranges[name].__enter__()

        def after(m, grad_input, grad_output, name=name):
            ranges.pop(name).__exit__(None, None, None)

        handles += [m.register_full_backward_pre_hook(before), m.register_full_backward_hook(after)]
    return handles


def _gather(x, idx):
    return x.gather(1, idx.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def test_select_by_index_equals_gather_with_gradients():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 5, requires_grad=True)
    idx = torch.argsort(torch.randn(3, 7), dim=-1)[:, :3]
    w = torch.randn(3, 3, 5)
    a, b = _gather(x, idx), pdm.select_by_index(x, idx)
    ga, = torch.autograd.grad((a * w).sum(), x)
    gb, = torch.autograd.grad((b * w).sum(), x)
    assert torch.equal(a, b) and torch.equal(ga, gb)
    assert a.grad_fn.name() == "GatherBackward0" and b.grad_fn.name() == "ViewBackward0"
    assert b.grad_fn.next_functions[0][0].name() == "IndexBackward0"


@pytest.mark.parametrize("prefix,ordered", [(1, False), (0, True)])
def test_indexing_patch_dropout_matches_timm(prefix, ordered):
    from timm.layers import PatchDropout

    x = torch.randn(4, 9 + prefix, 6, requires_grad=True)
    w = torch.randn(4, 4 + prefix, 6)
    outs, grads = [], []
    for cls in (PatchDropout, pdm.IndexingPatchDropout):
        torch.manual_seed(1)  # the same seed draws the same kept indices
        y = cls(0.5, num_prefix_tokens=prefix, ordered=ordered).train()(x)
        outs.append(y)
        grads.append(torch.autograd.grad((y * w).sum(), x)[0])
    assert outs[0].shape == (4, 4 + prefix, 6)
    assert torch.equal(outs[0], outs[1]) and torch.equal(grads[0], grads[1])
    assert torch.equal(pdm.IndexingPatchDropout(0.5).eval()(x), x)


def _grad_fn_names(t):
    seen, stack, names = set(), [t.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        stack += [f for f, _ in fn.next_functions]
    return names


def _vit():
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(img_size=32, patch_size=16, embed_dim=32, depth=1, num_heads=2, num_classes=5,
                             patch_drop_rate=0.5)


def test_gather_backward_gone_from_the_fixed_vit():
    from timm.layers import PatchDropout

    x = torch.randn(2, 3, 32, 32)
    model = _vit()
    assert type(model.patch_drop) is PatchDropout
    assert "GatherBackward0" in _grad_fn_names(model(x).sum())
    assert pdm.set_patch_dropout(model, "indexing") is model
    assert type(model.patch_drop) is pdm.IndexingPatchDropout and model.patch_drop.training
    names = _grad_fn_names(model(x).sum())
    assert "GatherBackward0" not in names and "IndexBackward0" in names
    assert type(pdm.set_patch_dropout(model, "gather").patch_drop) is PatchDropout


def test_set_patch_dropout_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown patch-dropout method"):
        pdm.set_patch_dropout(_vit(), "scatter")
    with pytest.raises(ValueError, match="patch_drop_rate > 0"):
        pdm.set_patch_dropout(nn.Linear(2, 2), "indexing")


# -- the notebook's hooks, read by module_table --------------------------------------------------------------------
def _labelled_profile(model, x, steps=2):
    loss_fn = nn.MSELoss()
    handles = label_backward(model) + label_backward(loss_fn, root="loss")
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                loss = loss_fn(model(x), torch.zeros(x.shape[0], 2))
                with record_function("backward"):
                    loss.backward()
    finally:
        for h in handles:
            h.remove()
    return prof


def test_module_table_reads_one_range_per_module_and_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 64), nn.Sequential(nn.ReLU(), nn.Linear(64, 64)), nn.Linear(64, 2))
    t = hooks.module_table(_labelled_profile(model, torch.randn(32, 4)), steps=2)
    assert set(t["module"]) == {"model", "loss", "0", "1", "1.0", "1.1", "2"}
    assert list(t.columns) == ["module", "depth", "calls", "backward_ms", "device_ms", "share"]
    assert (t["calls"] == 1).all() and (t["device_ms"] == 0).all()
    r = t.set_index("module")
    assert r.loc["1.1", "depth"] == 2 and r.loc["1", "depth"] == 1 and r.loc["model", "depth"] == 0
    assert r.loc["1", "backward_ms"] >= r.loc["1.1", "backward_ms"] > 0          # a range holds its children's
    assert (t["share"] > 0).all() and (t["share"] <= 1).all()
    assert list(t["backward_ms"]) == sorted(t["backward_ms"], reverse=True)
    assert not any(m._backward_hooks or m._backward_pre_hooks for m in model.modules())


def test_full_hooks_fail_on_an_inplace_op_downstream_and_work_without_it():
    for inplace in (True, False):
        m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=inplace), nn.Linear(8, 2))
        handles = label_backward(m)
        try:
            if inplace:
                with pytest.raises(RuntimeError, match="inplace|in-place"):
                    m(torch.randn(2, 8)).sum().backward()
            else:
                m(torch.randn(2, 8)).sum().backward()
        finally:
            for h in handles:
                h.remove()


# -- ops under a backward node; what deterministic mode changed ----------------------------------------------------
def test_ops_tree_under_gather_backward():
    x = torch.randn(3, 6, 4, requires_grad=True)
    idx = torch.tensor([[0, 2], [1, 3], [4, 5]])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _gather(x, idx).sum().backward()
    tree = views.ops_tree(prof)
    names = [n for _, n in tree]
    assert any("scatter_add" in n for n in names) and views.ops_tree(prof, "NoSuchBackward0") == []
    depth = dict((n, d) for d, n in reversed(tree))
    assert depth["aten::gather_backward"] == 1 and depth["aten::new_zeros"] == depth["aten::scatter_add_"] == 2
    assert names.index("aten::new_zeros") < names.index("aten::scatter_add_")


def test_stack_line_reads_what_the_trace_gave():
    exact = hooks.stack_line({"call_from": "timm/layers/patch_dropout.py:45",
                              "stack": ["timm/layers/patch_dropout.py(7): patch_dropout_forward"]})
    assert exact == {"file": "timm/layers/patch_dropout.py", "line": 45, "exact": True}
    start = hooks.stack_line({"call_from": "a/b.py:7 (function start)", "stack": []})
    assert start == {"file": "a/b.py", "line": 7, "exact": False}
    assert hooks.stack_line({"call_from": None}) is None


def test_reread_keeps_a_measured_floor_and_rereads_an_old_verdict():
    old = {"a": "x", "b": "y", "ratio": 1.0249, "low": 1.016, "high": 1.0294, "verdict": "no difference"}
    assert views.reread(old)["verdict"] == "faster, small"
    assert views.reread({**old, "low": 0.99})["verdict"] == "no difference"
    assert views.reread({**old, "ratio": 0.9, "low": 0.85, "high": 0.95})["verdict"] == "slower"
    measured = {**old, "floor_from": "A/A split"}
    assert views.reread(measured) == measured and views.reread(None) is None
