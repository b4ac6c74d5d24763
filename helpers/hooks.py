"""Label a module's backward pass in the profiler.

Taught in ``03_backward_hooks``. ``record_function`` cannot wrap a backward op (the
autograd engine runs it, not your code), but hooks can mark the edges of a module's
backward with tiny ``record_function`` ranges ("before backward of <class>[: details]" and
"after backward of <class>[: details]"), as in the source article; the module's backward lies
between the end of the first and the start of the second.

- ``backward_hook_wrapper``: the article's wrapper for one module, with *full backward hooks*
  (``register_full_backward_pre_hook`` / ``register_full_backward_hook``). They wrap the module's
  outputs in a custom autograd Function, so an in-place op on an output (``ReLU(inplace=True)``,
  ``out += identity``: every torchvision ResNet) is refused by autograd.
- ``label_modules``: label every named module with its qualified name (``blocks.3.attn``), with
  autograd *graph* hooks (``GraphLabels``), so it works on any eager model: in-place ops
  (``ReLU(inplace=True)``, ``out += identity``), keyword arguments, tuple/dict outputs, modules
  called twice. ``method="full"`` puts the article's full backward hooks on every module instead.
- ``label_all_modules_globally``: ``register_module_full_backward_hook`` (class names only).
- ``label_pairs`` / ``label_order`` / ``backward_table``: the markers in ``prof.events()`` -> spans,
  order, a per-module backward-time DataFrame.
- ``HookError``: the clear message for what cannot be labelled (a module whose backward was
  not seen, in-place ops with full hooks, ``torch.compile``).
"""
from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections import deque
from typing import Any, Iterable, Iterator

import torch
from torch import nn
from torch.profiler import record_function

BEFORE = "before backward of "
AFTER = "after backward of "
ROOT_NAME = "(model)"
_INPLACE_HINTS = ("is being modified inplace", "BackwardHookFunction")


class HookError(RuntimeError):
    """A module whose backward cannot be labelled with full backward hooks (the reason is the message)."""


def label(prefix: str, module: nn.Module, details: str | None = None) -> str:
    """``"<prefix><class>[: details]"``, the label the hooks emit."""
    text = f"{prefix}{type(module).__qualname__}"
    return f"{text}: {details}" if details else text


def _emit(name: str) -> None:
    """An instant range: enough for a marker in the trace and a timestamp in ``prof.events()``."""
    with record_function(name):
        pass


def is_compiled(module: nn.Module) -> bool:
    """True for a ``torch.compile``'d model (``OptimizedModule``) or one compiled in place (``.compile()``)."""
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # noqa: BLE001 - dynamo unavailable on this build
        OptimizedModule = ()  # type: ignore[assignment]
    for m in module.modules():
        if (OptimizedModule and isinstance(m, OptimizedModule)) or getattr(m, "_compiled_call_impl", None) is not None:
            return True
    return False


def refuse_compiled(module: nn.Module) -> None:
    if is_compiled(module):
        raise HookError(
            f"{type(module).__name__} is (or contains) a torch.compile'd module. Full backward hooks do not survive "
            "torch.compile: the compiled graph runs its own fused backward, so per-module labels would be missing or "
            "misplaced. Label the eager model (before torch.compile), find the bottleneck there, then compile.")


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
        _emit(before)
        return None  # leave the gradients unchanged

    def post_hook(mod, grad_input, grad_output):
        _emit(after)
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
                _emit(after)

    return ([module.register_forward_pre_hook(fwd_pre), module.register_full_backward_pre_hook(arm)]
            + [p.register_post_accumulate_grad_hook(count) for p in params])


def inplace_modules(model: nn.Module) -> list[str]:
    """``"<qualified name> (<class>)"`` of each submodule configured to work in place (``inplace=True``)."""
    return [f"{n or ROOT_NAME} ({type(m).__name__})" for n, m in model.named_modules()
            if getattr(m, "inplace", False) is True]


def explain(exc: BaseException, model: nn.Module | None = None) -> BaseException:
    """Turn autograd's view+inplace error from a hooked module into a ``HookError`` (others unchanged)."""
    msg = str(exc)
    if isinstance(exc, RuntimeError) and all(h in msg for h in _INPLACE_HINTS):
        suspects = inplace_modules(model) if model is not None else []
        where = f" In-place modules in this model: {', '.join(suspects)}." if suspects else ""
        return HookError(
            "a hooked module's output is modified in place downstream (for example by ReLU(inplace=True) or "
            "x += ...). Full backward hooks wrap the output in a custom autograd Function, and autograd forbids "
            f"in-place changes to it.{where} Fix: make that op out-of-place (inplace=False), or do not hook the "
            "module that feeds it.")
    return exc


@contextlib.contextmanager
def clear_hook_errors(model: nn.Module | None = None) -> Iterator[None]:
    """Re-raise autograd's hook/in-place error as a ``HookError`` with a clear message."""
    try:
        yield
    except RuntimeError as exc:
        new = explain(exc, model)
        if new is exc:
            raise
        raise new from None


def probe(model: nn.Module, *example_inputs) -> None:
    """One forward with gradients on, to surface a hook error up front (as a ``HookError``)."""
    with clear_hook_errors(model):
        model(*example_inputs)


def _select(model: nn.Module, names: Iterable[str] | None, leaves_only: bool) -> list[tuple[str, nn.Module]]:
    mods = dict(model.named_modules())
    wanted = list(mods) if names is None else list(names)
    unknown = [n for n in wanted if n not in mods]
    if unknown:
        raise KeyError(f"no submodule named {unknown}; try one of {list(mods)[:12]} ...")
    return [(n, mods[n]) for n in wanted if not (leaves_only and next(mods[n].children(), None) is not None)]


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
    for name, mod in _select(model, names, leaves_only):
        handles += backward_hook_wrapper(mod, name or ROOT_NAME)
    if example_inputs is not None:
        try:
            probe(model, *example_inputs)
        except BaseException:
            remove(handles)
            raise
    return handles


# ---------------------------------------------------------------------------------------------
# Labels from autograd graph hooks
# ---------------------------------------------------------------------------------------------

def _tensors(obj: Any) -> list[torch.Tensor]:
    """Every tensor in args / kwargs / an output (tuples, lists, dicts, named tuples, nested)."""
    from torch.utils._pytree import tree_leaves

    out: list[torch.Tensor] = []
    stack = list(tree_leaves(obj))
    while stack:
        x = stack.pop(0)
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, dict):  # a Mapping pytree does not know (e.g. a dict subclass)
            stack[:0] = list(x.values())
        elif isinstance(x, (list, tuple)):
            stack[:0] = list(x)
    return out


def _is_accumulate(node) -> bool:
    return hasattr(node, "variable")  # AccumulateGrad: the node that adds a leaf's gradient to .grad


def _in_backward() -> bool:
    try:
        return int(torch._C._current_graph_task_id()) != -1
    except Exception:  # noqa: BLE001
        return False


def _will_execute(node) -> bool:
    try:
        return bool(torch._C._will_engine_execute_node(node))
    except Exception:  # noqa: BLE001 - private API; assume it runs
        return True


class _Call:
    """One forward call of one labelled module: its span's state (no references to graph nodes)."""

    __slots__ = ("labels", "name", "cls", "call", "step", "phase", "task", "remaining", "finished", "start_ns",
                 "start_thread", "members", "__weakref__")

    def __init__(self, labels, name, cls, call, step):
        self.labels, self.name, self.cls, self.call, self.step = labels, name, cls, call, step
        self.phase, self.task, self.remaining, self.finished = "idle", None, set(), set()
        self.start_ns, self.start_thread, self.members = 0, 0, 0

    @property
    def details(self) -> str:
        return self.name if self.call == 1 else f"{self.name} (call {self.call})"


class GraphLabels(list):
    """Backward labels for many modules from autograd graph hooks; a list of its hook handles.

    Per forward call of a labelled module (forward pre-hook / forward hook, keyword arguments
    included; the hooks never touch the module's inputs or outputs):

    - its *members* are the autograd nodes created during the call (their sequence numbers lie
      between the pre-hook and the hook), plus the ``AccumulateGrad`` nodes of the parameters it
      used first in this step; found by walking back from its outputs' ``grad_fn``;
    - **start** ("before backward of ..."): a hook on each output tensor (and, for an output that is
      a view, on its base) fires when the gradient w.r.t. that output is ready. Such a hook stays on
      the node that was the output's ``grad_fn`` at forward time, so an in-place op on the output
      *after* the module (``ReLU(inplace=True)``, ``out += identity``) does not move it; if the
      output is a view and the in-place op bypasses its node, the base's hook starts the span;
    - **end** ("after backward of ..."): a post-hook on each *terminal* member (one whose next
      nodes are all outside the module: the ops that read the inputs, the parameters'
      ``AccumulateGrad``) counts down the terminal members that this backward will execute
      (``torch._C._will_engine_execute_node``, as ``register_multi_grad_hook`` uses); the last one
      emits the end. Parameters that get no gradient and inputs that need none are therefore fine.

    A module called twice in one step gets two spans; the second is labelled ``"<name> (call 2)"``.
    A module that returns its input unchanged (``Identity``) gets a zero-length span when that
    tensor's gradient is complete, i.e. after every other user of it. A parameter used by two
    calls (a shared module, tied weights) has its gradient accumulated once, in the span of the
    call that used it first in forward. Modules whose outputs need no gradient, and forwards re-run
    inside a backward (activation checkpointing), are not labelled; ``step_report`` lists them.
    Cost: Python work per module call (a walk over the nodes it made) and per terminal node.
    Start and end are paired here, under a lock (on CUDA the autograd engine runs hooks on its
    device thread), and each is emitted as a ``record_function`` marker that ``label_pairs``
    pairs by name. ``spans`` keeps the last spans in memory (``perf_counter_ns`` times),
    ``problems`` says which module could not be labelled and why. ``remove()`` (or leaving the
    ``with`` block) removes the hooks; graphs built before are silenced too.
    """

    def __init__(self, model: nn.Module, names: Iterable[str] | None = None, *, leaves_only: bool = False,
                 max_spans: int = 100_000):
        super().__init__()
        refuse_compiled(model)
        chosen = _select(model, names, leaves_only)
        self.model = model
        self.names = [n or ROOT_NAME for n, _ in chosen]
        self.active = True
        self.step = 0
        self.spans: deque = deque(maxlen=max_spans)
        self.calls: deque = deque(maxlen=max_spans)    # (step, name, call, needs_grad) per forward call
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self.append(model.register_forward_pre_hook(self._new_step))
        try:
            for name, mod in chosen:
                name = name or ROOT_NAME
                self.append(mod.register_forward_pre_hook(
                    lambda m, a, k, name=name: self._enter(m, name, a, k), with_kwargs=True))
                self.append(mod.register_forward_hook(
                    lambda m, a, k, o, name=name: self._exit(m, name, o), with_kwargs=True, always_call=True))
        except BaseException:
            self.remove()
            raise
        self.append(_Deactivate(self))

    # -- context manager / removal ------------------------------------------------------------
    def __enter__(self) -> "GraphLabels":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        remove(self)

    def __hash__(self):  # a list subclass used as an identity object in hooks
        return id(self)

    def __eq__(self, other):
        return self is other

    # -- forward side -------------------------------------------------------------------------
    def _stack(self) -> list:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def _thread_state(self, name: str) -> dict:
        d = getattr(self._local, name, None)
        if d is None:
            d = {}
            setattr(self._local, name, d)
        return d

    def _new_step(self, module, args) -> None:
        if not self._stack() and not _in_backward():  # a forward of the labelled model, not nested in one
            with self._lock:
                self.step += 1
                step = self.step
            # per thread (sequence numbers are per thread): this step's number, calls per module, and
            # id(parameter) -> start seq of the first call that used it
            self._local.step, self._local.counts, self._local.claims = step, {}, {}

    def _enter(self, module, name, args, kwargs) -> None:
        # no graph, or a forward re-run inside a backward (activation checkpointing): nothing to label
        if not (self.active and torch.is_grad_enabled()) or _in_backward():
            self._stack().append(None)
            return
        inputs = [torch.autograd.graph.get_gradient_edge(t).node
                  for t in _tensors((args, kwargs)) if t.requires_grad]
        with self._lock:
            counts = self._thread_state("counts")
            counts[name] = counts.get(name, 0) + 1
            call = _Call(self, name, type(module).__qualname__, counts[name], getattr(self._local, "step", self.step))
        self._stack().append((call, torch._C._autograd._get_sequence_nr(), inputs))

    def _exit(self, module, name, output) -> None:
        stack = self._stack()
        if not stack:
            return
        rec = stack.pop()
        if rec is None:
            return
        try:
            self._hook_call(*rec, output)
        finally:
            if not stack:
                self._local.starts = {}   # after the outermost labelled call: a fresh table next time

    def _hook_call(self, call: _Call, seq0: int, inputs: list, output) -> None:
        seq1 = torch._C._autograd._get_sequence_nr()
        # a leaf output (the module returned a parameter or its own leaf input) has no backward in the module;
        # a hook on a leaf would also stay on it for good
        outs = [t for t in _tensors(output) if t.requires_grad and t.grad_fn is not None] if self.active else []
        self.calls.append((call.step, call.name, call.call, bool(outs)))
        if not outs:
            return
        input_ids = {id(n) for n in inputs}
        members: dict[int, Any] = {}   # id -> node (kept only during this forward hook)
        succ: dict[int, list[int]] = {}

        def member(n) -> bool:
            if n is None or id(n) in input_ids:
                return False
            if id(n) in members:
                return True
            if _is_accumulate(n):
                var = n.variable
                claim = self._thread_state("claims").setdefault(id(var), seq0)
                if claim < seq0:  # a parameter already used by an earlier call this step: its span owns it
                    return False
            elif not (seq0 <= n._sequence_nr() < seq1):
                return False
            members[id(n)] = n
            return True

        def walk(root) -> set[int]:
            seen, todo = set(), [root]
            while todo:
                n = todo.pop()
                if id(n) in seen:
                    continue
                seen.add(id(n))
                if id(n) not in succ:
                    succ[id(n)] = [id(m) for m, _ in n.next_functions if member(m)]
                todo += [members[i] for i in succ[id(n)]]
            return seen

        starts = []   # (tensor to hook, its node or None)
        done_nodes = set()
        for t in outs:
            node = t.grad_fn
            starts.append((t, node))
            if t._is_view() and t._base is not None and t._base.grad_fn is not None:
                starts.append((t._base, t._base.grad_fn))
        reach: dict[int, set[int]] = {}
        for _, node in starts:
            if node is not None and id(node) not in reach:
                reach[id(node)] = walk(node) if member(node) else set()
        terminals = {i for i in succ if not succ[i]}
        call.members = len(members)
        for i in terminals:
            n = members[i]
            n.register_hook(lambda gi, go, call=call, i=i, shared=_is_accumulate(n): self._finished(call, i, shared))
        seqs = {id(n): (n._sequence_nr() if not _is_accumulate(n) else -1) for _, n in starts if n is not None}
        fns: dict[int, Any] = {}
        for t, node in starts:
            key = id(node)
            if key not in fns:
                own = key if key in terminals else None
                watch = [(i, members[i]) for i in reach[key] & terminals if i != key]
                # the other outputs' nodes, only those made before this one (a hook holding a later node could
                # make a reference cycle through the graph): if they run in this backward, so does their part
                others = [(n, [(i, members[i]) for i in reach[id(n)] & terminals])
                          for _, n in starts if n is not None and id(n) != key and seqs[id(n)] < seqs[key]]
                fns[key] = lambda call=call, own=own, watch=watch, others=others: self._started(call, own, watch,
                                                                                                   others)
            self._on_grad(t, fns[key])

    def _on_grad(self, t: torch.Tensor, fn) -> None:
        """Run ``fn`` when the gradient w.r.t. ``t`` (i.e. for its ``grad_fn``) is ready, newest ``fn`` first.

        Forward hooks run the inner module first and tensor hooks run in the order they were registered;
        so one list of callbacks per ``grad_fn`` (per outermost forward) is called by a hook on each
        of its tensors, once per backward, newest first: an enclosing module starts before the modules
        inside it, and of two modules whose outputs get their gradients at the same moment (``q_norm``,
        ``k_norm`` after one ``unbind``) the later one in forward starts first, as in reverse forward order.
        """
        starts = getattr(self._local, "starts", None)
        if starts is None:
            starts = self._local.starts = {}
        node = t.grad_fn
        # keyed by node: after an in-place op the same tensor object has a new grad_fn (the old hook stays
        # on the old node); the table holds the nodes only until the outermost labelled forward returns
        entry = starts.get(id(node))
        if entry is None or entry[0] is not node:
            fns: list = []
            fired = {"task": None}

            def dispatch(grad, fns=fns, fired=fired):
                task = self._task()
                if fired["task"] != task:   # the node's other tensors' hooks in this backward: already done
                    fired["task"] = task
                    for f in list(fns):
                        f()

            entry = starts[id(node)] = (node, fns, dispatch, set())
        node_, fns, dispatch, hooked = entry
        if id(t) not in hooked:
            hooked.add(id(t))
            t.register_hook(dispatch)
        if fn not in fns:
            fns.insert(0, fn)

    # -- backward side (any thread) -----------------------------------------------------------
    def _task(self) -> int:
        try:
            return int(torch._C._current_graph_task_id())
        except Exception:  # noqa: BLE001
            return -1

    def _started(self, call: _Call, own, watch, others=()) -> None:
        if not self.active:
            return
        task = self._task()
        pending = {i for i, n in watch if _will_execute(n)}
        for node, terms in others:
            if _will_execute(node):
                pending |= {i for i, n in terms if _will_execute(n)}
        if own is not None:
            pending.add(own)
        with self._lock:
            if call.phase != "idle" and call.task != task:   # a second backward through a retained graph
                call.phase = "idle"
            if call.phase == "done":
                if pending:  # another output's gradient came after the span had ended
                    self.problems.append(
                        f"{call.details}: its backward ran in two pieces (an output's gradient arrived after "
                        "the rest of its backward had finished); the span covers the first piece only")
                return
            if call.phase == "idle":
                call.phase, call.task, call.remaining, call.finished = "running", task, set(), set()
                call.start_ns, call.start_thread = time.perf_counter_ns(), threading.get_ident()
                _emit(f"{BEFORE}{call.cls}: {call.details}")
            call.remaining |= pending - call.finished
            if not call.remaining:
                self._close(call)

    def _finished(self, call: _Call, i: int, shared: bool) -> None:
        """A terminal member ran. ``shared``: an ``AccumulateGrad`` node, one per parameter for every graph
        alive at once (two forwards before a backward, or two threads): it may run for another backward."""
        if not self.active:
            return
        task = self._task()
        with self._lock:
            if call.phase == "running" and call.task == task:
                call.finished.add(i)
                call.remaining.discard(i)
                if not call.remaining:
                    self._close(call)
            elif call.phase == "idle" and call.task is None and not shared:
                call.task = -2  # report once
                self.problems.append(
                    f"{call.details}: part of its backward ran before the gradient w.r.t. its outputs was ready "
                    "(a tensor made inside it is used outside it?); no span")

    def _close(self, call: _Call) -> None:  # under the lock
        _emit(f"{AFTER}{call.cls}: {call.details}")
        call.phase = "done"
        self.spans.append({"step": call.step, "module": call.name, "call": call.call, "cls": call.cls,
                           "members": call.members,
                           "start_ns": call.start_ns, "end_ns": time.perf_counter_ns(),
                           "thread": call.start_thread, "end_thread": threading.get_ident()})

    # -- checks ---------------------------------------------------------------------------------
    def step_report(self, step: int | None = None) -> dict:
        """For one step (default: the last one with spans): which calls got a span and which did not."""
        if step is None:
            step = max((s["step"] for s in self.spans), default=self.step)
        calls = [(n, c) for st, n, c, g in self.calls if st == step and g]
        no_grad = sorted({n for st, n, c, g in self.calls if st == step and not g})
        spans = [(s["module"], s["call"]) for s in self.spans if s["step"] == step]
        missing = [(n, c) for n, c in calls if (n, c) not in spans]
        extra = [k for k in set(spans) if spans.count(k) > 1]
        return {"step": step, "calls": calls, "spans": spans, "missing": missing, "duplicated": extra,
                "no_backward": no_grad}

    def check(self, step: int | None = None) -> dict:
        """``step_report``, raising ``HookError`` (naming the modules and why) unless each call got one span."""
        r = self.step_report(step)
        if r["missing"] or r["duplicated"]:
            why = {p.split(":")[0]: p for p in self.problems}
            lines = []
            for n, c in r["missing"]:
                key = n if c == 1 else f"{n} (call {c})"
                lines.append(why.get(key, f"{key}: its backward was not seen (its outputs' gradients never reached "
                                          "it, or the backward has not run since its forward)"))
            lines += [f"{n} (call {c}): more than one span" for n, c in r["duplicated"]]
            raise HookError("cannot label the backward of " + "; ".join(lines))
        return r

    def probe(self, *args, **kwargs) -> dict:
        """One forward and backward on example inputs, then ``check()``; restores grads, buffers and RNG."""
        model = self.model
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [p.grad for p in params]
        buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        devices = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
        try:
            with torch.random.fork_rng(devices=devices):
                for p in params:
                    p.grad = None
                with clear_hook_errors(model):
                    outs = [t for t in _tensors(model(*args, **kwargs)) if t.requires_grad]
                    if not outs:
                        raise HookError("the model's output needs no gradient: nothing to label "
                                        "(are the parameters frozen, or is autograd off?)")
                    torch.autograd.backward([t.float().sum() for t in outs])
        finally:
            for p, g in zip(params, grads):
                p.grad = g
            with torch.no_grad():
                for n, b in model.named_buffers():
                    if n in buffers:
                        b.copy_(buffers[n])
        return self.check()


class _Deactivate:
    """The handle that silences a ``GraphLabels``' node hooks (graphs already built keep them)."""

    def __init__(self, labels: GraphLabels):
        self.labels = labels

    def remove(self) -> None:
        self.labels.active = False


def label_all_modules_globally(details: str | None = None) -> list:
    """Label *every* module's backward (in every model) with one call: class names only.

    Uses ``torch.nn.modules.module.register_module_full_backward_pre_hook`` and
    ``register_module_full_backward_hook``. A global hook sees the module object but not
    its name, so two instances of one class (``blocks.0.attn`` and ``blocks.1.attn``) get
    the same label. Remove the handles when done: global hooks affect all models.
    """
    from torch.nn.modules import module as module_mod

    def pre_hook(mod, grad_output):
        _emit(label(BEFORE, mod, details))

    def post_hook(mod, grad_input, grad_output):
        _emit(label(AFTER, mod, details))

    return [module_mod.register_module_full_backward_pre_hook(pre_hook),
            module_mod.register_module_full_backward_hook(post_hook)]


def remove(handles: Iterable) -> None:
    for h in handles:
        h.remove()


_CALL = re.compile(r"^(?P<name>.*) \(call (?P<call>\d+)\)$")


def _split(name: str) -> tuple[str, str, str] | None:
    """``"before backward of Attention: blocks.3.attn"`` -> ("before", "Attention", "blocks.3.attn")."""
    for kind, prefix in (("before", BEFORE), ("after", AFTER)):
        if name.startswith(prefix):
            rest = name[len(prefix):]
            cls, _, details = rest.partition(": ")
            return kind, cls, details
    return None


def _module_and_call(details: str) -> tuple[str, int]:
    """``"blocks.0 (call 2)"`` -> ("blocks.0", 2); ``"blocks.0"`` -> ("blocks.0", 1)."""
    m = _CALL.match(details)
    return (m.group("name"), int(m.group("call"))) if m else (details, 1)


def _host(events) -> list:
    """Host-side (CPU) events only: on CUDA a label can also be drawn on the GPU timeline."""
    return [e for e in events if str(getattr(e, "device_type", "CPU")).endswith("CPU")]


def label_pairs(events) -> list[dict]:
    """Match "before"/"after" markers (per label) into spans, in the order they closed.

    A span ends at the last "after" marker before the label's next "before". Markers are paired
    by name, not by thread: on CUDA the autograd engine runs the hooks on its device thread, and
    a span may end on another thread than it started (``GraphLabels`` pairs them itself and gives
    the second call of a module in one step its own name, ``"<name> (call 2)"``).

    ``events`` is ``prof.events()`` (``FunctionEvent`` objects, times in microseconds).
    Each span: module (details or class, without the call suffix), call, cls, start_us, end_us,
    thread (where it started), end_thread.
    """
    marks = []
    for e in _host(events):
        parts = _split(e.name)
        if parts is not None:
            marks.append((e.time_range.start, e.time_range.end, parts, getattr(e, "thread", 0)))
    marks.sort(key=lambda m: m[0])
    open_: dict[tuple, list] = {}
    last: dict[tuple, dict] = {}
    spans = []
    for start, end, (kind, cls, details), thread in marks:
        key = (cls, details)
        if kind == "before":
            open_.setdefault(key, []).append((end, thread))
            last.pop(key, None)
        elif open_.get(key):
            begun, th = open_[key].pop()
            module, call = _module_and_call(details)
            last[key] = {"module": module or cls, "call": call, "cls": cls, "start_us": begun, "end_us": start,
                         "thread": th, "end_thread": thread}
            spans.append(last[key])
        elif key in last:  # a later "after" of the same span (end_after_param_grads): the span ends there
            last[key]["end_us"] = start
            last[key]["end_thread"] = thread
    return spans


def label_order(events, kind: str = "before") -> list[str]:
    """The modules in the order their "before"/"after" markers fired (first backward only is up to the caller)."""
    out = []
    for e in sorted(_host(events), key=lambda e: e.time_range.start):
        parts = _split(e.name)
        if parts is not None and parts[0] == kind:
            out.append(_module_and_call(parts[2])[0] or parts[1])
    return out


def backward_table(prof, steps: int | None = None):
    """Per-module backward time from the label pairs in ``prof.events()``, as a DataFrame.

    Columns: module, cls, depth (dots in the qualified name), calls, backward_ms (CPU span
    between the markers, per step), device_ms (self device time of the ops launched inside
    the span, per step; 0 on the CPU), share (of the whole backward: the ``backward``
    ``record_function`` label when present, else the widest span). Sorted by backward_ms.
    """
    import pandas as pd

    events = _host(prof.events())
    spans = label_pairs(events)
    n_steps = steps or max(1, sum(1 for e in events if e.name.startswith("ProfilerStep")))
    ops_by_thread: dict = {}
    for e in events:
        if _split(e.name) is None and not e.name.startswith("ProfilerStep"):
            ops_by_thread.setdefault(getattr(e, "thread", 0), []).append(e)
    rows: dict[str, dict] = {}
    for s in spans:
        dev = 0.0
        for e in ops_by_thread.get(s["thread"], []):
            if s["start_us"] <= e.time_range.start and e.time_range.end <= s["end_us"]:
                dev += getattr(e, "self_device_time_total", 0.0) or 0.0
        r = rows.setdefault(s["module"], {"module": s["module"], "cls": s["cls"], "calls": 0, "cpu_us": 0.0, "dev_us": 0.0})
        r["calls"] += 1
        r["cpu_us"] += max(0.0, s["end_us"] - s["start_us"])
        r["dev_us"] += dev
    df = pd.DataFrame(list(rows.values()), columns=["module", "cls", "calls", "cpu_us", "dev_us"])
    df["depth"] = [0 if m == ROOT_NAME else m.count(".") + 1 for m in df["module"]]
    df["backward_ms"] = df.pop("cpu_us") / 1000.0 / n_steps
    df["device_ms"] = df.pop("dev_us") / 1000.0 / n_steps
    bwd = [e for e in events if e.name == "backward"]
    total = sum(e.time_range.end - e.time_range.start for e in bwd) / 1000.0 / n_steps if bwd else 0.0
    if total <= 0 and len(df):
        total = float(df["backward_ms"].max())
    df["share"] = df["backward_ms"] / total if total > 0 else 0.0
    df = df.sort_values("backward_ms", ascending=False).reset_index(drop=True)
    return df[["module", "cls", "depth", "calls", "backward_ms", "device_ms", "share"]]


def forward_completion_order(model: nn.Module, *inputs, names: Iterable[str] | None = None) -> list[str]:
    """Qualified names in the order their forward *finished* (children before their parent).

    Its reverse is the order in which the backward reaches the modules of a chain, i.e. the
    order the "before backward" markers should fire. Runs one forward without gradients.
    """
    wanted = set(names) if names is not None else None
    order: list[str] = []
    handles = []
    for n, m in model.named_modules():
        if wanted is None or n in wanted:
            handles.append(m.register_forward_hook(lambda mod, i, o, n=n: order.append(n or ROOT_NAME)))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        remove(handles)
    return order
