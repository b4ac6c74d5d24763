"""helpers.lessons.backward_hooks: backward labels, spans and patch dropout (notebook 03_backward_hooks)."""
import contextlib

import pandas as pd
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from helpers.lessons import backward_hooks as hooks
from helpers.lessons.backward_hooks import graph_labels
from helpers.lessons.backward_hooks import patch_dropout as pdm

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
    assert type(model.patch_drop) is pdm.PatchDropout
    assert "GatherBackward0" in _grad_fn_names(model(x).sum())
    pdm.set_patch_dropout(model, "indexing")
    assert type(model.patch_drop) is pdm.IndexingPatchDropout
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


# ---------------------------------------------------------------------------------------------
# Backward labels from autograd graph hooks (label_modules' default): any eager model
# ---------------------------------------------------------------------------------------------

def _step(model, *args, **kwargs):
    out = model(*args, **kwargs)
    tensors = graph_labels._tensors(out)
    torch.autograd.backward([t.sum() for t in tensors if t.requires_grad])


def _spans(labels, step=None):
    """The in-memory spans of one step (default: the last), in the order they started."""
    step = step or max(s["step"] for s in labels.spans)
    return sorted((s for s in labels.spans if s["step"] == step), key=lambda s: s["start_ns"])


def _model_check(model, x, steps=1, profiled=False):
    """Label every module, run ``steps`` steps: one span per forward call, in backward order.

    ``profiled``: under the profiler too, and the markers paired by ``label_pairs`` give the same spans
    (slow on a small CPU: the profiler's event list, so only for some models).
    """
    fwd = hooks.forward_completion_order(model, x)
    with hooks.label_modules(model, example_inputs=(x,)) as labels:
        with (profile(activities=[ProfilerActivity.CPU]) if profiled else contextlib.nullcontext()) as prof:
            for _ in range(steps):
                model.zero_grad(set_to_none=True)
                model(x).sum().backward()
        report = labels.check()
    assert report["calls"] and not report["missing"] and not report["duplicated"] and not labels.problems
    assert sorted(report["spans"]) == sorted(report["calls"])          # one span per forward call
    assert len(labels.spans) == (steps + 1) * len(report["calls"])     # the probe's step and each step
    ran = {n or hooks.ROOT_NAME for n in fwd}
    assert {n for n, _ in report["calls"]} | set(report["no_backward"]) == ran
    spans = _spans(labels)
    # backward order: the reverse of forward completion, except modules that pass their input through
    # unchanged (Identity): their gradient is the input's, complete only once every user of it is done
    through = {s["module"] for s in spans if s["members"] == 0}
    assert [s["module"] for s in spans if s["module"] not in through] == [n for n in fwd[::-1] if n not in through]
    for s in spans:
        assert s["end_ns"] >= s["start_ns"]
    if profiled:  # the profiler sees the same spans (record_function markers, paired by label_pairs)
        prof_spans = hooks.label_pairs(prof.events())
        assert sorted((s["module"], s["call"]) for s in prof_spans) == sorted(report["spans"] * steps)
    # hooks removed on leaving the with block: a further step records nothing
    n = len(labels.spans)
    model(x).sum().backward()
    assert len(labels.spans) == n and not model._forward_hooks and not model._forward_pre_hooks
    return report, through


def _tv(name, **kw):
    import torchvision

    torch.manual_seed(0)
    return getattr(torchvision.models, name)(num_classes=10, **kw).train()


def _timm(name, **kw):
    import timm

    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, num_classes=10, **kw).train()


def test_resnet18_with_inplace_relu_and_residual_add_gets_one_span_per_module():
    """torchvision ResNet: ReLU(inplace=True) and ``out += identity``. The starting code refused it."""
    model = _tv("resnet18")
    report, through = _model_check(model, torch.randn(2, 3, 32, 32), steps=2, profiled=True)
    assert ("layer1.0.relu", 2) in report["calls"]              # BasicBlock calls its ReLU twice: two spans
    assert len(report["calls"]) == len(dict(model.named_modules())) + 8
    assert not through


def test_resnet_full_hooks_still_refuse_what_graph_labels_handle():
    model = _tv("resnet18")
    x = torch.randn(2, 3, 32, 32)
    with pytest.raises(hooks.HookError, match="modified in place"):
        hooks.label_modules(model, example_inputs=(x,), method="full")
    assert not model._forward_hooks and not model._backward_hooks    # the failed probe removed its hooks
    labels = hooks.label_modules(model, example_inputs=(x,))         # the default: graph hooks
    labels.remove()
    for m in model.modules():                                        # every ReLU out of place: still `out += identity`
        if isinstance(m, nn.ReLU):
            m.inplace = False
    with pytest.raises(hooks.HookError, match="modified in place"):
        hooks.label_modules(model, example_inputs=(x,), method="full")
    with hooks.label_modules(model, example_inputs=(x,)) as labels:
        assert len(labels.check()["spans"]) == len(dict(model.named_modules())) + 8
    with pytest.raises(ValueError, match="unknown labelling method"):
        hooks.label_modules(model, method="magic")


@pytest.mark.parametrize("family,build,size", [
    ("timm residual CNN, in-place act", lambda: _timm("resnet10t"), 32),
    ("torchvision inverted residual + SE", lambda: _tv("mobilenet_v3_small"), 32),
    ("timm depthwise + SE, stochastic depth", lambda: _timm("mobilenetv3_small_050", drop_path_rate=0.2), 32),
    ("timm ViT, patch dropout", lambda: _timm("vit_tiny_patch16_224", img_size=32, patch_drop_rate=0.5,
                                              drop_path_rate=0.1), 32),
    ("torchvision ViT", lambda: __import__("torchvision").models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10), 32),
])
def test_model_families_get_one_span_per_module_per_step(family, build, size):
    _model_check(build(), torch.randn(2, 3, size, size))


def test_identity_passthrough_gets_a_zero_length_span():
    model = _timm("convnext_atto")         # shortcut / drop_path are Identity: they pass their input through
    _, through = _model_check(model, torch.randn(2, 3, 32, 32))
    assert any(n.endswith("shortcut") for n in through)


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(4, 4)

    def forward(self, x):
        return self.f(torch.tanh(self.f(x)))


def test_module_called_twice_gets_two_spans_in_backward_order():
    torch.manual_seed(0)
    model = _Twice()
    with hooks.label_modules(model, example_inputs=(torch.randn(2, 4),)) as labels:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _step(model, torch.randn(2, 4))
    spans = {(s["module"], s["call"]): s for s in _spans(labels)}
    assert set(spans) == {("(model)", 1), ("f", 1), ("f", 2)}
    second, first = spans[("f", 2)], spans[("f", 1)]
    # the second call's backward runs first and ends before the first call's starts (not one mis-paired span);
    # the shared weight's gradient is accumulated once, after both: it belongs to the first call's span
    assert second["end_ns"] <= first["start_ns"]
    names = {e.name for e in prof.events()}
    assert {"before backward of Linear: f", "before backward of Linear: f (call 2)"} <= names
    pairs = hooks.label_pairs(prof.events())
    assert sorted((p["module"], p["call"]) for p in pairs) == [("(model)", 1), ("f", 1), ("f", 2)]
    assert hooks.label_order(prof.events()) == ["(model)", "f", "f"]
    table = hooks.backward_table(prof, steps=1).set_index("module")
    assert table.loc["f", "calls"] == 2


class _Kw(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, *, scale):
        return self.lin(x) * scale


class _KwModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 1)
        self.kw = _Kw()

    def forward(self, x):
        h = self.a(x)
        return self.kw(x=h, scale=self.b(h))    # called with keyword arguments only


def test_module_called_with_keyword_arguments_ends_before_its_inputs_producers():
    torch.manual_seed(0)
    model = _KwModel()
    with hooks.label_modules(model, example_inputs=(torch.randn(2, 4),)) as labels:
        _step(model, torch.randn(2, 4))
    s = {x["module"]: x for x in _spans(labels)}
    assert set(s) == {"(model)", "a", "b", "kw", "kw.lin"}
    assert s["kw"]["end_ns"] <= s["b"]["start_ns"] and s["kw"]["end_ns"] <= s["a"]["start_ns"]
    assert s["kw"]["start_ns"] <= s["kw.lin"]["start_ns"] and s["kw.lin"]["end_ns"] <= s["kw"]["end_ns"]


class _Multi(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.p = nn.Linear(4, 4)
        self.q = nn.Linear(4, 4)

    def forward(self, x):
        a, b = self.p(x), self.q(x)
        return {"a": a, "b": b} if self.kind == "dict" else (a, b)


@pytest.mark.parametrize("kind", ["tuple", "dict"])
def test_modules_returning_tuples_or_dicts(kind):
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("m", _Multi(kind))
    x = torch.randn(2, 4, requires_grad=True)
    with hooks.label_modules(model.m) as labels:
        out = model.m(x)
        a, b = (out["a"], out["b"]) if kind == "dict" else out
        (a.sum() * 2 + b.pow(2).sum()).backward()
        s = {x["module"]: x for x in _spans(labels)}
        assert set(s) == {"(model)", "p", "q"} and not labels.problems
        assert s["(model)"]["start_ns"] <= min(s["p"]["start_ns"], s["q"]["start_ns"])
        assert s["(model)"]["end_ns"] >= max(s["p"]["end_ns"], s["q"]["end_ns"])
        a, b = (lambda o: (o["a"], o["b"]) if kind == "dict" else o)(model.m(x))
        a.sum().backward()                                     # the second output unused this time
        assert {x["module"] for x in _spans(labels)} == {"(model)", "p"}
        with pytest.raises(hooks.HookError, match=r"\bq: its backward was not seen"):
            labels.check()                                     # q ran forward, but no gradient reached it
    assert x.grad is not None


class _InplaceInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        y += x                 # like ResNet's out += identity
        y[:, 0] = 0            # in place on a view of an intermediate
        return y * 1.5


class _ViewOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x):
        return self.lin(x).t()    # a view of an intermediate


def test_inplace_ops_inside_and_after_modules():
    torch.manual_seed(0)
    model = nn.Sequential(_InplaceInside(), nn.ReLU(inplace=True), _ViewOut())
    x = torch.randn(3, 4)
    with hooks.label_modules(model, example_inputs=(x,)) as labels:
        y = model(x)
        y.mul_(2)                              # in place on the view output: autograd bypasses its TBackward0
        y.sum().backward()
        labels.check()
    s = {x["module"]: x for x in _spans(labels)}
    assert set(s) >= {"0", "0.lin", "1", "2", "2.lin"}
    assert s["2"]["end_ns"] <= s["1"]["start_ns"] and s["1"]["end_ns"] <= s["0"]["start_ns"]   # reverse order
    assert s["0"]["start_ns"] <= s["0.lin"]["start_ns"] <= s["0.lin"]["end_ns"] <= s["0"]["end_ns"]


def test_what_autograd_does_to_a_hook_when_the_output_is_modified_in_place():
    """The facts GraphLabels relies on (torch 2.x): check them on this install."""
    fired = []
    x = torch.randn(3, 4, requires_grad=True)
    y = x * 2                                         # a module's output, MulBackward0
    node = y.grad_fn
    node.register_prehook(lambda g: fired.append("plain"))
    y.relu_()                                         # in place after the module: a new grad_fn on the same tensor
    assert type(y.grad_fn).__name__ == "ReluBackward0" and y.grad_fn.next_functions[0][0] is node
    y.sum().backward()
    assert fired == ["plain"]                         # the hook on the forward-time grad_fn still fires, after relu's

    base = x * 2
    v = base.t()                                      # a module's output that is a view
    v.grad_fn.register_prehook(lambda g: fired.append("view"))
    base.register_hook(lambda g: fired.append("base"))
    v.add_(1)                                         # in place on the view: CopySlices on the base
    v.sum().backward()
    assert fired == ["plain", "base"]                 # the view's node is bypassed; the base's hook still fires


class _Frozen(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)                # a parameter that gets no gradient
        self.frozen = nn.Linear(4, 4).requires_grad_(False)

    def forward(self, x):
        return self.used(self.frozen(x))


def test_parameters_without_gradient_and_inputs_without_gradient():
    torch.manual_seed(0)
    model = _Frozen()
    x = torch.randn(2, 4)                             # the input needs no gradient
    with hooks.label_modules(model, example_inputs=(x,)) as labels:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            _step(model, x)
        r = labels.check()
        assert ("frozen", 1) not in r["calls"] and r["no_backward"] == ["frozen"]   # nothing to label: said so
        s = {x["module"]: x for x in _spans(labels)}
        assert set(s) == {"(model)", "used"}
        # the span waits for the weight's gradient to be accumulated
        acc = [e for e in prof.events() if "AccumulateGrad" in e.name]
        pairs = {p["module"]: p for p in hooks.label_pairs(prof.events())}
        assert pairs["used"]["end_us"] >= max(e.time_range.start for e in acc)
        # a backward that asks for no parameter gradient: the AccumulateGrad nodes do not run, the span still ends
        h = model.used.weight
        out = model(x)
        g, = torch.autograd.grad(out.sum(), h)
        assert labels.check()["spans"].count(("used", 1)) == 1


class _Unused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 2)
        self.aux = nn.Linear(4, 2)

    def forward(self, x):
        self.aux(x)            # runs forward, but nothing uses its output
        return self.used(x)


def test_probe_names_the_module_it_cannot_label_and_removes_the_hooks():
    model = _Unused()
    before = model.used.weight.grad
    with pytest.raises(hooks.HookError, match=r"cannot label the backward of aux: its backward was not seen"):
        hooks.label_modules(model, example_inputs=(torch.randn(2, 4),))
    for m in model.modules():                                   # all hooks removed again
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert model.used.weight.grad is before                     # the probe left the gradients alone
    with hooks.label_modules(model, ["used"], example_inputs=(torch.randn(2, 4),)) as labels:
        assert labels.check()["spans"] == [("used", 1)]


def test_labels_pair_across_threads():
    """Two threads run steps through one labelled model at once: every call still gets exactly one span."""
    import threading

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 1))
    errors = []

    def work():
        try:
            for _ in range(5):
                model(torch.randn(4, 8)).sum().backward()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    with hooks.label_modules(model) as labels:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors and not labels.problems
    assert len(labels.calls) == 2 * 5 * 4 and len(labels.spans) == len(labels.calls)
    assert all(s["end_ns"] >= s["start_ns"] for s in labels.spans)


def test_forward_without_backward_leaves_nothing_alive():
    """The hooks hold no reference cycle through the graph: a graph never backpropagated is freed."""
    import gc
    import weakref

    model = nn.Sequential(_Multi("tuple"))        # two outputs: the second's hook sees the first's node
    gc.collect()
    old = {id(o) for o in gc.get_objects() if type(o) is graph_labels._Call}
    with hooks.label_modules(model):
        out = model[0](torch.randn(3, 4, requires_grad=True))
        states = [weakref.ref(o) for o in gc.get_objects() if type(o) is graph_labels._Call and id(o) not in old]
        assert len(states) == 3   # model[0], its p and q
        del out
        assert not [r for r in states if r() is not None]      # freed by reference counting, no gc needed


def test_removed_labels_are_silent_on_graphs_built_before():
    model = _mlp()
    labels = hooks.label_modules(model)
    out = model(torch.randn(3, 4))
    hooks.remove(labels)                       # the notebook's way; labels.remove() is the same
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out.sum().backward()
    assert not hooks.label_pairs(prof.events()) and not labels.spans
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_compiled_model_is_refused_by_graph_labels_too():
    model = _mlp()
    model.compile()
    with pytest.raises(hooks.HookError, match="torch.compile"):
        hooks.GraphLabels(model)
    with pytest.raises(hooks.HookError, match="torch.compile"):
        hooks.label_modules(torch.compile(_mlp()), method="graph")


def test_activation_checkpointing_recompute_is_not_labelled_twice():
    from torch.utils.checkpoint import checkpoint

    class Ckpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
            self.head = nn.Linear(4, 1)

        def forward(self, x):
            return self.head(checkpoint(self.inner, x, use_reentrant=False))

    torch.manual_seed(0)
    model = Ckpt()
    with hooks.label_modules(model, example_inputs=(torch.randn(2, 4),)) as labels:
        _step(model, torch.randn(2, 4))
        r = labels.check()
    assert sorted(r["spans"]) == sorted(r["calls"]) and len(r["calls"]) == 5


def test_two_forwards_before_their_backwards():
    """Two graphs alive at once share each parameter's AccumulateGrad node: each step still gets its spans."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 1))
    with hooks.label_modules(model) as labels:
        l1 = model(torch.randn(2, 4)).sum()
        l2 = model(torch.randn(2, 4)).sum()
        l1.backward()
        l2.backward()
        (model(torch.randn(2, 4)).sum() + model(torch.randn(2, 4)).sum()).backward()   # one backward, two graphs
        for step in (1, 2, 3, 4):
            r = labels.check(step)
            assert sorted(r["spans"]) == sorted(r["calls"]) and len(r["calls"]) == 4
    assert not labels.problems


def test_backward_table_as_on_cuda_device_thread_and_gpu_label_copies():
    """On CUDA the hooks run on autograd's device thread and the profiler also draws every label on the GPU
    timeline (later than the host range). The span comes from the host markers on the device thread; the
    GPU copies are ignored; device time is the ops' on that thread inside the span, not the main thread's."""
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    def ev(name, start, end, thread, device=DeviceType.CPU, dev_us=0.0):
        return NS(name=name, time_range=NS(start=start, end=end), thread=thread, device_type=device,
                  self_device_time_total=dev_us)

    before, after = hooks.BEFORE + "Linear: fc", hooks.AFTER + "Linear: fc"
    events = [ev("ProfilerStep#1", 0, 400, 1), ev("backward", 50, 300, 1),
              ev(before, 100, 101, 2), ev("aten::mm", 120, 180, 2, dev_us=50.0), ev(after, 200, 201, 2),
              ev("aten::item", 130, 170, 1, dev_us=999.0),                       # another thread: not the span's
              ev(before, 150, 151, 7, DeviceType.CUDA), ev(after, 260, 261, 7, DeviceType.CUDA)]   # GPU copies
    prof = NS(events=lambda: events)
    spans = hooks.label_pairs(events)
    assert [(s["module"], s["start_us"], s["end_us"], s["thread"]) for s in spans] == [("fc", 101, 200, 2)]
    t = hooks.backward_table(prof).set_index("module")
    assert t.loc["fc", "backward_ms"] == pytest.approx(0.099) and t.loc["fc", "device_ms"] == pytest.approx(0.05)
    assert t.loc["fc", "share"] == pytest.approx(99 / 250)


def test_op_diff():
    a = pd.DataFrame([{"name": "aten::gather", "on_device": False, "calls": 2, "cpu_total_ms": 1.0},
                      {"name": "aten::fill_", "on_device": False, "calls": 12, "cpu_total_ms": 0.1},
                      {"name": "indexing_backward_kernel", "on_device": True, "calls": 2, "cpu_total_ms": 0.0},
                      {"name": "<built-in method gather of Tensor object at 0x7f00>", "on_device": False,
                       "calls": 2, "cpu_total_ms": 1.0}])
    b = pd.DataFrame([{"name": "aten::gather", "on_device": False, "calls": 2, "cpu_total_ms": 1.2},
                      {"name": "aten::fill_", "on_device": False, "calls": 93, "cpu_total_ms": 0.4},
                      {"name": "aten::set_", "on_device": False, "calls": 6, "cpu_total_ms": 0.01},
                      {"name": "index_put_with_sort_kernel", "on_device": True, "calls": 2, "cpu_total_ms": 0.0},
                      {"name": "<built-in method gather of Tensor object at 0x7f99>", "on_device": False,
                       "calls": 2, "cpu_total_ms": 1.0}])
    d = hooks.op_diff(a, b)
    assert list(d["name"]) == ["index_put_with_sort_kernel", "indexing_backward_kernel", "aten::fill_", "aten::set_"]
    r = d.set_index("name")
    assert r.loc["indexing_backward_kernel", "change"] == "only in default"
    assert r.loc["index_put_with_sort_kernel", "change"] == "only in deterministic"
    assert r.loc["aten::fill_", "calls_deterministic"] == 93 and r.loc["aten::fill_", "change"] == "more calls in deterministic"
    assert hooks.op_diff(a, a).empty
