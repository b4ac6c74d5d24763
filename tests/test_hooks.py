"""helpers.hooks and helpers.patch_dropout (notebook 03_backward_hooks)."""
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from helpers import hooks, patch_dropout as pdm

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _profile_backward(model, x, extra=None):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = model(x)
        loss = extra(out) if extra else out.sum()
        loss.backward()
    return prof


def test_label_pairs_for_each_module_in_backward_order():
    model = _mlp()
    handles = hooks.label_modules(model)
    prof = _profile_backward(model, torch.randn(3, 4, requires_grad=True))
    names = [e.name for e in prof.events()]
    for mod in ("(model)", "0", "1", "2"):
        assert any(n.startswith("before backward of") and n.endswith(f": {mod}") for n in names)
        assert any(n.startswith("after backward of") and n.endswith(f": {mod}") for n in names)
    assert hooks.label_order(prof.events(), "before") == ["(model)", "2", "1", "0"]  # reverse of forward
    assert hooks.label_order(prof.events(), "after") == ["2", "1", "0", "(model)"]
    spans = {s["module"]: s for s in hooks.label_pairs(prof.events())}
    assert set(spans) == {"(model)", "0", "1", "2"}
    assert spans["(model)"]["start_us"] <= spans["2"]["start_us"] and spans["0"]["end_us"] <= spans["(model)"]["end_us"]
    table = hooks.backward_table(prof, steps=1)
    assert set(table["module"]) == {"(model)", "0", "1", "2"}
    assert (table["backward_ms"] >= 0).all() and table.iloc[0]["module"] == "(model)"
    hooks.remove(handles)
    prof2 = _profile_backward(model, torch.randn(3, 4, requires_grad=True))
    assert not hooks.label_pairs(prof2.events())


def test_article_wrapper_labels_class_and_details():
    model = _mlp()
    hooks.backward_hook_wrapper(model[2], "head")
    prof = _profile_backward(model, torch.randn(3, 4))
    names = {e.name for e in prof.events()}
    assert {"before backward of Linear: head", "after backward of Linear: head"} <= names


def test_global_hooks_cannot_tell_instances_apart():
    model = _mlp()
    handles = hooks.label_all_modules_globally()
    try:
        prof = _profile_backward(model, torch.randn(3, 4, requires_grad=True))
    finally:
        hooks.remove(handles)
    before = [n for n in hooks.label_order(prof.events(), "before")]
    assert before.count("Linear") == 2 and "Sequential" in before


def test_inplace_op_downstream_gives_a_clear_error_with_full_hooks():
    """The article's full backward hooks refuse an in-place op downstream; method="full" keeps that path."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True))
    with pytest.raises(hooks.HookError, match=r"modified in place.*\b1\b"):
        hooks.label_modules(model, ["0"], example_inputs=(torch.randn(2, 4),), method="full")
    model(torch.randn(2, 4)).sum().backward()  # the failed probe removed its hooks again
    hooks.backward_hook_wrapper(model[0])
    with pytest.raises(hooks.HookError, match="inplace=False"):
        with hooks.clear_hook_errors(model):
            model(torch.randn(2, 4))


def test_compiled_model_is_refused():
    model = torch.compile(_mlp())  # nothing is compiled until the first call
    with pytest.raises(hooks.HookError, match="torch.compile"):
        hooks.label_modules(model)
    with pytest.raises(hooks.HookError, match="torch.compile"):
        hooks.backward_hook_wrapper(model)


def test_unknown_module_name():
    with pytest.raises(KeyError, match="no submodule"):
        hooks.label_modules(_mlp(), ["blocks.9"])


def test_select_by_index_equals_gather_with_gradients():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 5, requires_grad=True)
    idx = pdm.keep_indices(3, 7, 0.5, ordered=False, device="cpu")
    w = torch.randn(3, idx.shape[1], 5)
    a = pdm.select_by_gather(x, idx)
    ga, = torch.autograd.grad((a * w).sum(), x)
    b = pdm.select_by_index(x, idx)
    gb, = torch.autograd.grad((b * w).sum(), x)
    assert torch.equal(a, b) and torch.equal(ga, gb)


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
    x = torch.randn(2, 3, 32, 32)
    model = _vit()
    assert pdm.method_of(model) == "gather"
    assert "GatherBackward0" in _grad_fn_names(model(x).sum())
    pdm.set_patch_dropout(model, "indexing")
    assert pdm.method_of(model) == "indexing"
    names = _grad_fn_names(model(x).sum())
    assert "GatherBackward0" not in names and "IndexBackward0" in names
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(x).sum().backward()
    ev = {e.name for e in prof.events()}
    assert not any("GatherBackward" in n for n in ev) and any("IndexBackward" in n for n in ev)


def test_set_patch_dropout_refuses_bad_input():
    with pytest.raises(ValueError, match="unknown patch-dropout method"):
        pdm.set_patch_dropout(_vit(), "scatter")
    with pytest.raises(ValueError, match="patch_drop_rate > 0"):
        pdm.set_patch_dropout(nn.Linear(2, 2), "indexing")


def test_span_of_a_module_whose_input_needs_no_gradient_waits_for_its_parameters():
    model = _mlp()
    hooks.label_modules(model)  # wait_for_params=True by default
    prof = _profile_backward(model, torch.randn(3, 4))  # the input needs no gradient
    spans = {s["module"]: s for s in hooks.label_pairs(prof.events())}
    assert set(spans) == {"(model)", "0", "1", "2"}
    # the model's and the first layer's spans end after the first layer's weight gradient, not at their start
    assert spans["(model)"]["end_us"] >= spans["1"]["end_us"] and spans["0"]["end_us"] >= spans["1"]["end_us"]
    accumulate = [e for e in prof.events() if "AccumulateGrad" in e.name]
    assert spans["(model)"]["end_us"] >= max(e.time_range.start for e in accumulate)

    plain = _mlp()
    for name, mod in plain.named_modules():
        hooks.backward_hook_wrapper(mod, name or "(model)", wait_for_params=False)  # the article's version
    prof = _profile_backward(plain, torch.randn(3, 4))
    early = {s["module"]: s for s in hooks.label_pairs(prof.events())}
    assert early["(model)"]["end_us"] <= early["2"]["start_us"]  # "after" fired before the backward even started


def test_model_compiled_in_place_is_refused():
    model = _mlp()
    model.compile()  # Module.compile(): compiled in place, still a Sequential
    assert hooks.is_compiled(model) and not hooks.is_compiled(_mlp())
    with pytest.raises(hooks.HookError, match="torch.compile"):
        hooks.label_modules(model)
