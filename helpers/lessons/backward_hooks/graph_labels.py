"""Backward labels for many modules from autograd *graph* hooks (``GraphLabels``; taught in ``03_backward_hooks``):
unlike full backward hooks they never wrap a module's outputs, so in-place ops, keyword arguments, tuple/dict
outputs and modules called twice all work."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Iterable

import torch
from torch import nn

from .markers import AFTER, BEFORE, ROOT_NAME, HookError, clear_hook_errors, emit, refuse_compiled, remove, select_modules

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
        chosen = select_modules(model, names, leaves_only)
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
                emit(f"{BEFORE}{call.cls}: {call.details}")
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
        emit(f"{AFTER}{call.cls}: {call.details}")
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


