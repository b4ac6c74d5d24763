"""Label a module's backward pass in the profiler (taught in ``03_backward_hooks``).

``record_function`` cannot wrap a backward op (the autograd engine runs it, not your code), but hooks can mark the
edges of a module's backward with tiny ``record_function`` ranges (``markers.py``), as in the source article.

- ``backward_hook_wrapper``: the article's wrapper for one module, with *full backward hooks*
  (``register_full_backward_pre_hook`` / ``register_full_backward_hook``). They wrap the module's
  outputs in a custom autograd Function, so an in-place op on an output (``ReLU(inplace=True)``,
  ``out += identity``: every torchvision ResNet) is refused by autograd.
- ``label_modules``: label every named module with its qualified name (``blocks.3.attn``), with
  autograd *graph* hooks (``graph_labels.GraphLabels``), so it works on any eager model: in-place ops
  (``ReLU(inplace=True)``, ``out += identity``), keyword arguments, tuple/dict outputs, modules
  called twice. ``method="full"`` puts the article's full backward hooks on every module instead.
- ``label_all_modules_globally``: ``register_module_full_backward_hook`` (class names only).
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from .graph_labels import GraphLabels
from .markers import AFTER, BEFORE, ROOT_NAME, emit, label, probe, refuse_compiled, remove, select_modules

def backward_hook_wrapper(module: nn.Module, details: str | None = None, wait_for_params: bool = True) -> list:
    """The article's wrapper: mark the start and end of ``module``'s backward in the profiler.

    Registers ``register_full_backward_pre_hook`` (emits "before backward of <class>[: details]")
    and ``register_full_backward_hook`` (emits "after backward of <class>[: details]").
    With ``wait_for_params`` (see ``end_after_param_grads``) a module whose inputs need no
    gradient gets a second, later "after" marker. Returns the hook handles (``remove(handles)``).
    """
    refuse_compiled(module)
    before = label(BEFORE, module, details)
    after = label(AFTER, module, details)

    def pre_hook(mod, grad_output):
        emit(before)
        return None  # leave the gradients unchanged

    def post_hook(mod, grad_input, grad_output):
        emit(after)
        return None

    handles = [module.register_full_backward_pre_hook(pre_hook), module.register_full_backward_hook(post_hook)]
    if wait_for_params:
        handles += end_after_param_grads(module, after)
    return handles


def end_after_param_grads(module: nn.Module, after: str) -> list:
    """A later "after" marker for a module whose inputs need no gradient (the model itself, the patch embedding).

    Its full backward hook then fires as soon as the gradient w.r.t. its *outputs* is ready,
    before its own backward has run (PyTorch warns "Full backward hook is firing when gradients
    are computed with respect to module outputs"). So a forward pre-hook notes whether any input
    needs a gradient; if none does, the backward pre-hook arms a counter of the module's
    trainable parameters, and each parameter's post-accumulate-grad hook counts down: when
    the last gradient is accumulated, ``after`` is emitted again. ``label_pairs`` ends a span
    at its last "after" marker.
    """
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return []
    state = {"no_input_grad": False, "pending": 0}

    def fwd_pre(mod, args):
        state["no_input_grad"] = not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)

    def arm(mod, grad_output):
        state["pending"] = len(params) if state["no_input_grad"] else 0

    def count(p):
        if state["pending"] > 0:
            state["pending"] -= 1
            if state["pending"] == 0:
                emit(after)

    return ([module.register_forward_pre_hook(fwd_pre), module.register_full_backward_pre_hook(arm)]
            + [p.register_post_accumulate_grad_hook(count) for p in params])


def label_modules(model: nn.Module, names: Iterable[str] | None = None, *, leaves_only: bool = False,
                  example_inputs: tuple | None = None, example_kwargs: dict | None = None,
                  method: str = "graph"):
    """Label the backward of each named submodule with its qualified name (``blocks.3.attn``).

    ``names`` picks some (``["patch_embed", "blocks"]``; ``""`` is the model itself), by
    default all of ``model.named_modules()``; ``leaves_only`` keeps modules without children.

    ``method="graph"`` (default) uses autograd graph hooks (see ``GraphLabels``): it works with
    in-place ops, keyword arguments, tuple/dict outputs and modules called twice, and never
    changes the model's outputs. With ``example_inputs`` (and ``example_kwargs``) one probe step
    (forward and backward; gradients, buffers and RNG state restored afterwards) checks that every
    module that ran gets exactly one span, else raises ``HookError`` naming the module and why,
    and removes the hooks again. ``method="full"`` is the article's way (``backward_hook_wrapper``
    on every module; refuses in-place ops downstream of a hooked module).

    Returns the handles (a list; ``remove(handles)`` or ``handles.remove()`` undoes everything;
    also a context manager).
    """
    refuse_compiled(model)
    if method == "full":
        return _label_modules_full(model, names, leaves_only=leaves_only, example_inputs=example_inputs)
    if method != "graph":
        raise ValueError(f"unknown labelling method {method!r}; use 'graph' or 'full'")
    labels = GraphLabels(model, names, leaves_only=leaves_only)
    if example_inputs is not None or example_kwargs is not None:
        try:
            labels.probe(*(example_inputs or ()), **(example_kwargs or {}))
        except BaseException:
            labels.remove()
            raise
    return labels


def _label_modules_full(model: nn.Module, names: Iterable[str] | None = None, *, leaves_only: bool = False,
                        example_inputs: tuple | None = None) -> list:
    """The article's labels on every module: ``backward_hook_wrapper`` (full backward hooks) each."""
    handles = []
    for name, mod in select_modules(model, names, leaves_only):
        handles += backward_hook_wrapper(mod, name or ROOT_NAME)
    if example_inputs is not None:
        try:
            probe(model, *example_inputs)
        except BaseException:
            remove(handles)
            raise
    return handles



def label_all_modules_globally(details: str | None = None) -> list:
    """Label *every* module's backward (in every model) with one call: class names only.

    Uses ``torch.nn.modules.module.register_module_full_backward_pre_hook`` and
    ``register_module_full_backward_hook``. A global hook sees the module object but not
    its name, so two instances of one class (``blocks.0.attn`` and ``blocks.1.attn``) get
    the same label. Remove the handles when done: global hooks affect all models.
    """
    from torch.nn.modules import module as module_mod

    def pre_hook(mod, grad_output):
        emit(label(BEFORE, mod, details))

    def post_hook(mod, grad_input, grad_output):
        emit(label(AFTER, mod, details))

    return [module_mod.register_module_full_backward_pre_hook(pre_hook),
            module_mod.register_module_full_backward_hook(post_hook)]


