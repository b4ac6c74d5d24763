"""Notebook 03's experiments: the article's ViT training step, built, timed and profiled (``03_backward_hooks``).

``Lab(notebook, params, device, results)`` holds the lesson's sizes (``notebook.sizes.BACKWARD_HOOKS``), the device
and the results log. ``build`` makes timm's VisionTransformer with patch dropout (kept patches selected by gather or by
indexing), its loss and its training step on one random batch; ``profile_run`` profiles a step with the lesson's
schedule; ``run_config`` times and profiles one configuration (determinism × method × batch size) and reads from its
trace the host-device syncs inside the backward (each once, by kind), the GPU idle time they caused and both clocks of
the node that selects the kept patches (``trace_metrics``); ``run_matrix`` profiles the determinism × method matrix
and ``time_matrix`` times it in interleaved rounds (the only step times the notebook compares); ``labelled_table``
profiles a model labelled by hooks and returns its per-module backward table; ``interleaved`` times steps in turns,
each under its own deterministic setting, with the garbage collector paused (``shared_steps``: the matrix's steps on
one model); ``equivalence`` compares the two methods' loss and gradients
(``measure.compare.compare``) before any timing. On a CPU every step runs with one intra-op thread
(``measure.timing.torch_threads``): on a shared 2-core machine two OpenMP threads wait for each other whenever one
of them is descheduled, which stretches steps several-fold and at random. ``validate_config`` refuses a bad panel
value with a message; ``run_config`` turns the same values into a failed row.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping

import torch
from torch import nn

from ... import traces as tr
from ...measure import device as dv
from ...measure import profiling, timing, training
from ...measure.compare import compare
from ...measure.validate import InvalidValue, validate_batch_size, validate_bool, validate_choice
from ...notebook import env
from ...notebook import tensorboard as tb
from . import patch_dropout as pdm
from .markers import remove
from .spans import backward_table

SELECT_NODE = {"gather": "GatherBackward0", "indexing": "IndexBackward0"}   # the node that selects the kept patches
MATRIX = [(det, method) for det in (True, False) for method in pdm.METHODS]   # deterministic rows first
CPU_THREADS = 1   # intra-op threads for every step on a CPU (see the module docstring)
PANEL_MAX_BATCH = 1024
LOSS_TOL = {"rtol": 1e-6, "atol": 1e-7}    # the two selections must give the same loss...
GRAD_TOL = {"rtol": 1e-5, "atol": 1e-6}    # ...and every parameter's gradient, within float32 rounding
NUM_CLASSES = 1000


def validate_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """The panel's check: ``deterministic`` True or False, a batch size of 1..1024, a known method. Returns the
    values; raises ``InvalidValue`` with a one-line message."""
    validate_bool(values["deterministic"], "deterministic")
    validate_batch_size(values["batch_size"], maximum=PANEL_MAX_BATCH)
    validate_choice(values["method"], pdm.METHODS, "patch-dropout method")
    return dict(values)


def config_name(deterministic: Any, method: Any, batch_size: Any) -> str:
    """``det gather bs=8``; a value that is not a boolean is named as given (its row fails)."""
    try:
        mode = "det" if validate_bool(deterministic, "deterministic") else "nondet"
    except InvalidValue:
        mode = f"deterministic={deterministic!r}"
    return f"{mode} {method} bs={batch_size}"


def matrix_name(deterministic: bool, method: str) -> str:
    """A matrix configuration's name, the same at every scale (so a reference run's rows match): ``det gather``."""
    return f"{'det' if deterministic else 'nondet'} {method}"


def trace_metrics(doc: Mapping[str, Any], method: str) -> dict[str, Any]:
    """What one configuration's trace says about its backward, per profiled step.

    ``syncs_per_step`` and ``<kind>_per_step``: host-device syncs inside the ``backward`` label, each counted once
    (``traces.count_syncs``); ``backward_phases``: how many ``backward`` labels the trace holds;
    ``sync_gpu_idle_per_step_ms``: the GPU idle time after those syncs (``traces.sync_costs``); the host and device
    time of the node that selects the kept patches (``traces.backward_ops``; None when it is not in the trace).
    """
    counts = tr.count_syncs(doc)
    n = max(counts["phases"], 1)
    idle_ms = float(tr.sync_costs(doc, phase="backward")["gpu_idle_us"].sum()) / 1000.0 / n
    ops = tr.backward_ops(doc).set_index("op")
    node = SELECT_NODE[method]
    return {"syncs_per_step": counts["per_step"], "backward_phases": counts["phases"],
            **{f"{kind}_per_step": c / n for kind, c in counts["by_kind"].items()},
            "sync_gpu_idle_per_step_ms": idle_ms,
            "select_backward_host_ms": float(ops.loc[node, "host_ms"]) if node in ops.index else None,
            "select_backward_device_ms": float(ops.loc[node, "device_ms"]) if node in ops.index else None}


def under_deterministic(deterministic: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run inside ``env.deterministic(deterministic)`` (set for the call, restored after it)."""
    def run():
        with env.deterministic(deterministic):
            return fn()
    return run


class Lab:
    """The lesson's experiments on one device, recorded in ``results`` (a ``notebook.results.Results``).

    ``params``: the sizes (``batch_size``, ``image_size``, ``patch_size``, ``depth``, ``width``, ``heads``; timed
    ``steps`` and ``warmup``; ``rounds`` of interleaved timing; the profiler schedule ``wait``, ``warmup_steps``,
    ``active``). Each configuration's
    profile and trace are kept in ``profs`` / ``docs`` under its name.
    """

    def __init__(self, notebook: str, params: Mapping[str, Any], device, results, *, patch_drop_rate: float = 0.5,
                 lr: float = 0.001, momentum: float = 0.9, seed: int = 0, cpu_threads: int | None = CPU_THREADS):
        self.notebook, self.device, self.results = notebook, torch.device(device), results
        self.threads = cpu_threads if self.device.type == "cpu" else None   # None: the device's own setting
        self.batch_size, self.image_size = params["batch_size"], params["image_size"]
        self.patch_size = params["patch_size"]
        self.depth, self.width, self.heads = params["depth"], params["width"], params["heads"]
        self.steps, self.warmup, self.rounds = params["steps"], params["warmup"], params["rounds"]
        self.wait, self.warmup_steps, self.active = params["wait"], params["warmup_steps"], params["active"]
        self.patch_drop_rate, self.lr, self.momentum, self.seed = patch_drop_rate, lr, momentum, seed
        self.acts = profiling.activities(self.device)
        self.profs: dict[str, Any] = {}
        self.docs: dict[str, dict] = {}

    # -- the article's set-up -------------------------------------------------------------------------------------
    def model(self, method: str = "gather") -> nn.Module:
        """timm's VisionTransformer with patch dropout selecting by ``method``, on the device, in training mode."""
        from timm.models.vision_transformer import VisionTransformer

        model = VisionTransformer(img_size=self.image_size, patch_size=self.patch_size, embed_dim=self.width,
                                  depth=self.depth, num_heads=self.heads, num_classes=NUM_CLASSES,
                                  patch_drop_rate=self.patch_drop_rate)
        return pdm.set_patch_dropout(model, method).to(self.device).train()

    def batch(self, batch_size: int | None = None):
        """Random images and labels (drawn from the current random state)."""
        b = self.batch_size if batch_size is None else batch_size
        x = torch.randn(b, 3, self.image_size, self.image_size, device=self.device)
        return x, torch.randint(0, NUM_CLASSES, (b,), device=self.device)

    def build(self, method: str = "gather", batch_size: int | None = None, seed: int | None = None):
        """The article's set-up from ``seed``: the model, CrossEntropyLoss, SGD with momentum, one random batch.

        Returns ``(model, loss_fn, train_step)``; ``train_step()`` runs one labelled step (forward, backward,
        optimizer_step) on that batch.
        """
        env.seed_everything(self.seed if seed is None else seed)
        model = self.model(method)
        loss_fn = nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=self.lr, momentum=self.momentum)
        x, y = self.batch(batch_size)
        return model, loss_fn, training.make_train_step(model, opt, loss_fn, x, y)

    def describe(self, model: nn.Module) -> str:
        n_tokens = (self.image_size // self.patch_size) ** 2
        kept = max(1, int(n_tokens * (1 - self.patch_drop_rate)))
        return (f"ViT: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters, {n_tokens} patches of "
                f"which {kept} are kept per image, batch {self.batch_size}")

    # -- timing and profiling -------------------------------------------------------------------------------------
    def profile_run(self, step: Callable[[], Any], name: str, trace: bool = False):
        """Profile ``step`` with the schedule; ``trace=True`` writes a TensorBoard trace to a fresh directory.
        Returns ``(prof, trace_dir or None)``."""
        tdir = profiling.fresh_trace_dir(f"{self.notebook}/{name}") if trace else None
        prof = profiling.profile_steps(step, wait=self.wait, warmup=self.warmup_steps, active=self.active,
                                       device=self.device, trace_dir=tdir)
        return prof, tdir

    def interleaved(self, steps: Mapping[Any, tuple[bool, Callable[[], Any]]], rounds: int | None = None,
                    warmup: int | None = None) -> dict[Any, timing.StepTimes]:
        """Time ``steps`` ({key: (deterministic, step_fn)}) in turns (``measure.timing.interleaved_times``), each
        step under its own deterministic setting; ``self.rounds`` rounds by default, the garbage collector paused
        (``timing.gc_paused``)."""
        wrapped = {k: under_deterministic(d, fn) for k, (d, fn) in steps.items()}
        with timing.torch_threads(self.threads), timing.gc_paused():
            return timing.interleaved_times(wrapped, self.rounds if rounds is None else rounds, self.device,
                                            warmup=self.warmup if warmup is None else warmup)

    def run_config(self, deterministic: Any = True, method: Any = "gather", batch_size: Any = None,
                   name: str | None = None, timed: bool = True) -> dict[str, Any]:
        """Time (``timed``) and profile one configuration; returns its results row (profile and trace kept in
        ``profs`` / ``docs``). A bad value (``deterministic`` not a boolean, an unknown method, a batch size below 1)
        or any failure becomes a failed row with a one-line message."""
        batch_size = self.batch_size if batch_size is None else batch_size
        name = name or config_name(deterministic, method, batch_size)
        cfg = {"deterministic": deterministic, "method": method, "batch_size": batch_size}

        def experiment():
            det = validate_bool(deterministic, "deterministic")
            validate_choice(method, pdm.METHODS, "patch-dropout method")
            validate_batch_size(batch_size)
            _, _, step = self.build(method, batch_size)
            with env.deterministic(det), timing.torch_threads(self.threads):
                dv.reset_peak_memory(self.device)
                t = timing.time_steps(step, steps=self.steps, warmup=self.warmup, device=self.device) if timed else None
                p, tdir = self.profile_run(step, name.replace(" ", "_"), trace=True)
            doc = tr.load_trace(profiling.trace_files(tdir)[0])
            names = [e.name for e in p.events()]
            self.profs[name], self.docs[name] = p, doc
            m = {**(t.metrics(batch_size) if t else {}), "peak_mem_mb": dv.peak_memory_mb(self.device),
                 **trace_metrics(doc, method), "gather_backward_calls": names.count("GatherBackward0"),
                 "index_backward_calls": names.count("IndexBackward0"), "trace_dir": str(tdir)}
            tb.log_experiment(self.notebook, name, cfg, m, step_times_ms=t.times_ms if t else None,
                              batch_size=batch_size)
            return m

        return self.results.record(name, cfg, experiment)

    def run_matrix(self) -> dict[tuple[bool, str], dict[str, Any]]:
        """Profile the determinism × method matrix (``MATRIX``), one row each named by ``matrix_name``, untimed: the
        step times the notebook compares come from ``time_matrix``. Returns ``{(deterministic, method): row}``."""
        return {(d, m): self.run_config(d, m, name=matrix_name(d, m), timed=False) for d, m in MATRIX}

    def shared_steps(self, configs=MATRIX) -> dict[tuple[bool, str], tuple[bool, Callable[[], Any]]]:
        """Steps for ``configs`` ((deterministic, method) pairs) on one model, optimizer and batch: each step first
        puts its method's patch dropout in place, so that the configurations differ by the selection method and the
        deterministic setting only. (Two builds of the same model can differ by a few per cent in step time on a CPU,
        a difference that interleaved rounds cannot tell from the configurations'.) For ``interleaved``."""
        model, _, step = self.build()
        drops = {m: pdm.set_patch_dropout(model, m).patch_drop for m in pdm.METHODS}

        def with_method(method):
            def run():
                model.patch_drop = drops[method]
                return step()
            return run

        return {(d, m): (d, with_method(m)) for d, m in configs}

    def time_matrix(self, rounds: int | None = None) -> dict[tuple[bool, str], timing.StepTimes]:
        """The matrix's four configurations timed in interleaved rounds (``interleaved`` over ``shared_steps``),
        each recorded as a row ``interleaved <matrix_name>``. Returns ``{(deterministic, method): StepTimes}``."""
        times = self.interleaved(self.shared_steps(MATRIX), rounds=rounds)
        for (d, m), t in times.items():
            self.results.record(f"interleaved {matrix_name(d, m)}", {"deterministic": d, "method": m,
                                "batch_size": self.batch_size, "timing": "interleaved"},
                                lambda t=t: t.metrics(self.batch_size))
        return times

    def labelled_table(self, wrap: Callable[[nn.Module, nn.Module], Any], name: str):
        """Build a fresh deterministic model, let ``wrap(model, loss_fn)`` add hooks (it returns their handles),
        profile, remove the hooks. Returns ``(backward table, prof, model)``."""
        m, lf, step = self.build()
        handles = wrap(m, lf)
        try:
            with env.deterministic(True), timing.torch_threads(self.threads):
                p, _ = self.profile_run(step, name)
        finally:
            remove(handles)   # global hooks especially: they would label every later model too
        return backward_table(p), p, m

    # -- equivalence before timing --------------------------------------------------------------------------------
    def equivalence(self, batch_size: int | None = None) -> dict[str, Any]:
        """Both methods from the same weights, on the same batch, with the same kept patches: one loss and backward
        each. Returns ``loss_equal`` (bit for bit), ``loss_close`` and ``grads_close`` (within ``LOSS_TOL`` /
        ``GRAD_TOL``) and ``grad_max_abs_diff``, from ``measure.compare.compare`` (timm's gather the reference)."""
        outs = {}
        for method in pdm.METHODS:
            m, lf, _ = self.build(method)
            env.seed_everything(self.seed + 1)
            xb, yb = self.batch(batch_size)
            env.seed_everything(self.seed + 2)                     # same kept patches for both methods
            loss = lf(m(xb), yb)
            loss.backward()
            outs[method] = (loss.detach(), {n: p.grad.detach().clone() for n, p in m.named_parameters()})
        (la, ga), (lb, gb) = outs["gather"], outs["indexing"]
        loss, grads = compare(la, lb, **LOSS_TOL), compare(ga, gb, **GRAD_TOL)
        return {"loss_equal": loss["exact"], "loss_close": loss["close"],
                "grad_max_abs_diff": grads["max_abs_diff"], "grads_close": grads["close"]}
