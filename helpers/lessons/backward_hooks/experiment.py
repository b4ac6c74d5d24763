"""Notebook 03's runs (``Lab``): the ViT step built, timed and profiled per configuration, bad values and failures as
failed rows, under a time guard. On a CPU a step runs on one thread, timed on process CPU time, as in 01."""

from typing import Any, Callable, Mapping

import torch
from torch import nn

import perf_doctor as tr

from ...measure import device as dv
from ...measure import profiling, timing, training
from ...measure.compare import equal_outputs
from ...measure.validate import InvalidValue, validate_batch_size, validate_bool, validate_choice
from ...notebook import budget as budget_mod, env
from ...notebook import tensorboard as tb
from .patch_dropout import METHODS, set_patch_dropout

SELECT_NODE = {"gather": "GatherBackward0", "indexing": "IndexBackward0"}  # selects kept patches
MATRIX = [(det, method) for det in (True, False) for method in METHODS]  # deterministic rows first
NUM_CLASSES, LR, MOMENTUM, SEED = 1000, 0.001, 0.9, 0


def validate_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """The panel's check (``InvalidValue``): a bool, a batch size of 1..1024, a known method."""
    validate_bool(values["deterministic"], "deterministic")
    validate_batch_size(values["batch_size"], maximum=1024)
    validate_choice(values["method"], METHODS, "patch-dropout method")
    return dict(values)


def matrix_name(deterministic: bool, method: str) -> str:
    """``det gather``, ``nondet indexing``: the same at every scale, so a reference run's rows match."""
    return f"{'det' if deterministic else 'nondet'} {method}"


def config_name(deterministic: Any, method: Any, batch_size: Any) -> str:
    """``det gather bs=8``; a value that is not a boolean is named as given (its row fails)."""
    try:
        mode = "det" if validate_bool(deterministic, "deterministic") else "nondet"
    except InvalidValue:
        mode = f"deterministic={deterministic!r}"
    return f"{mode} {method} bs={batch_size}"


def trace_metrics(doc: Mapping[str, Any], method: str) -> dict[str, Any]:
    """Per profiled step: ``backward``'s syncs by kind and the GPU idle after them, and the selecting node's times."""
    counts = tr.count_syncs(doc)
    n = max(counts["phases"], 1)
    ops = tr.backward_ops(doc).set_index("op")
    node = ops.loc[SELECT_NODE[method]] if SELECT_NODE[method] in ops.index else {}
    idle_ms = float(tr.sync_costs(doc, phase="backward")["gpu_idle_us"].sum()) / 1e3
    return {
        "syncs_per_step": counts["per_step"],
        "backward_phases": counts["phases"],
        **{f"{kind}_per_step": c / n for kind, c in counts["by_kind"].items()},
        "sync_gpu_idle_per_step_ms": idle_ms / n,
        "select_backward_host_ms": node.get("host_ms"),
        "select_backward_device_ms": node.get("device_ms"),
    }


class Lab:
    """The lesson's experiments on one device, recorded in ``results`` (profiles and traces in ``profs``, ``docs``)."""

    def __init__(
        self, notebook, params, device, results, *, patch_drop_rate=0.5, cpu_threads=1, budget=None
    ):
        self.notebook, self.results, self.p, self.budget = notebook, results, dict(params), budget
        self.device, self.patch_drop_rate = torch.device(device), patch_drop_rate
        self.threads = cpu_threads if self.device.type == "cpu" else None  # None: the device's own
        self.batch_size, self.rounds = params["batch_size"], params["rounds"]
        self.acts = profiling.activities(self.device)
        self.profs, self.docs = {}, {}  # profiles and traces by row name

    def guard(self, fn: Callable[[], Any], guarded: bool = True) -> Callable[[], Any]:
        """``fn`` under the time guard (``Budget.wrap``: ``OverBudget`` once it is spent), or as it is without one."""
        return self.budget.wrap(fn) if guarded and self.budget is not None else fn

    def batch(self, batch_size: int | None = None):
        """Random images and labels (from the current random state)."""
        b, size = self.batch_size if batch_size is None else batch_size, self.p["image_size"]
        return (
            torch.randn(b, 3, size, size, device=self.device),
            torch.randint(0, NUM_CLASSES, (b,), device=self.device),
        )

    def build(self, method: str = "gather", batch_size: int | None = None):
        """From the seed: timm's ViT (patch dropout by ``method``), loss, SGD, a batch: ``(model, loss_fn, step)``."""
        from timm.models.vision_transformer import VisionTransformer

        env.seed_everything(SEED)
        p = self.p
        model = VisionTransformer(
            img_size=p["image_size"],
            patch_size=p["patch_size"],
            embed_dim=p["width"],
            depth=p["depth"],
            num_heads=p["heads"],
            num_classes=NUM_CLASSES,
            patch_drop_rate=self.patch_drop_rate,
        )
        model = set_patch_dropout(model, method).to(self.device).train()
        loss_fn = nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        step = training.make_train_step(model, opt, loss_fn, *self.batch(batch_size))
        return model, loss_fn, step

    def profile(self, step: Callable[[], Any], name: str | None = None, deterministic: bool = True):
        """Profile ``step`` in ``deterministic`` mode (``name``: a TensorBoard trace): ``(prof, trace_dir)``."""
        tdir = profiling.fresh_trace_dir(f"{self.notebook}/{name}") if name else None
        with env.deterministic(deterministic), timing.torch_threads(self.threads):
            prof = profiling.profile_steps(
                step,
                wait=self.p["wait"],
                warmup=self.p["warmup_steps"],
                active=self.p["active"],
                device=self.device,
                trace_dir=tdir,
            )
        return prof, tdir

    def run_config(
        self,
        deterministic=True,
        method="gather",
        batch_size=None,
        name=None,
        timed=True,
        guarded=True,
    ) -> dict[str, Any]:
        """Time (``timed``) and profile one configuration: its results row. Values are checked first, then the run goes
        through the time guard (``guarded``); a bad value or failure is a failed row."""
        batch_size = self.batch_size if batch_size is None else batch_size
        name = name or config_name(deterministic, method, batch_size)
        cfg = {"deterministic": deterministic, "method": method, "batch_size": batch_size}

        def experiment():
            det = validate_bool(deterministic, "deterministic")
            validate_choice(method, METHODS, "patch-dropout method")
            validate_batch_size(batch_size)
            return self.guard(lambda: measure(det), guarded)()

        def measure(det):
            step = self.build(method, batch_size)[2]
            dv.reset_peak_memory(self.device)
            t = self.time(step, det) if timed else None
            prof, tdir = self.profile(step, name.replace(" ", "_"), det)
            doc = tr.load_trace(profiling.trace_files(tdir)[0])
            self.profs[name], self.docs[name] = prof, doc
            names = [e.name for e in prof.events()]
            m = {
                **(t.metrics(batch_size) if t else {}),
                "peak_mem_mb": dv.peak_memory_mb(self.device),
                **trace_metrics(doc, method),
                "gather_backward_calls": names.count("GatherBackward0"),
                "index_backward_calls": names.count("IndexBackward0"),
                "trace_dir": str(tdir),
            }
            times = t.times_ms if t else None
            tb.log_experiment(
                self.notebook, name, cfg, m, step_times_ms=times, batch_size=batch_size
            )
            return m

        return self.results.record(name, cfg, experiment)

    def time(self, step, deterministic: bool = True, steps: int | None = None) -> timing.StepTimes:
        """``step`` alone: ``warmup`` calls, then ``steps`` timed ones (default: the ``steps`` parameter; on a CPU on
        process CPU time)."""
        fns = {"step": (deterministic, step)}
        return self.interleaved(fns, rounds=steps or self.p["steps"], guarded=False)["step"]

    def run_matrix(self) -> dict[tuple[bool, str], dict[str, Any]]:
        """Profile the ``MATRIX`` configurations, untimed: ``{(deterministic, method): row}``; notes the profiled
        steps and each profile's syncs per step."""
        rows = {
            (d, m): self.run_config(d, m, name=matrix_name(d, m), timed=False) for d, m in MATRIX
        }
        ok = {matrix_name(*k): r["metrics"] for k, r in rows.items() if r["status"] == "ok"}
        self.results.note("profiled_steps", self.p["active"])
        self.results.note("syncs_per_step", {n: m["syncs_per_step"] for n, m in ok.items()})
        return rows

    def interleaved(self, steps: Mapping[Any, tuple], rounds: int | None = None, guarded=True):
        """Time ``steps`` ({key: (deterministic, step_fn)}) in turns (on a CPU on process CPU time) under the time
        guard (``guarded``): ``{key: StepTimes}``."""

        # a contextmanager decorates: each call of a step enters its deterministic mode anew
        fns = {k: env.deterministic(d)(fn) for k, (d, fn) in steps.items()}
        rounds = self.rounds if rounds is None else rounds

        def run():
            with timing.torch_threads(self.threads), timing.gc_paused():
                warmup = self.p["warmup"]
                return timing.interleaved_times(fns, rounds, self.device, warmup, cpu_time=True)

        return self.guard(run)()

    def time_matrix(self, rounds: int | None = None) -> dict[tuple[bool, str], timing.StepTimes]:
        """The four configurations on ONE model and batch (two builds can differ by a few per cent on a CPU), timed
        interleaved, each recorded as ``interleaved <matrix_name>``; {} when the time guard stopped them."""
        model, _, step = self.build()
        drops = {m: set_patch_dropout(model, m).patch_drop for m in METHODS}

        def with_method(method):
            def run():
                model.patch_drop = drops[method]
                return step()

            return run

        over = None
        try:
            times = self.interleaved({(d, m): (d, with_method(m)) for d, m in MATRIX}, rounds)
        except budget_mod.OverBudget as exc:
            times, over = {}, exc

        def metrics(t):
            if t is None:
                raise over
            return t.metrics(self.batch_size)

        for d, m in MATRIX:
            cfg = {"deterministic": d, "method": m, "batch_size": self.batch_size}
            cfg["timing"] = "interleaved"
            name = f"interleaved {matrix_name(d, m)}"
            self.results.record(name, cfg, lambda t=times.get((d, m)): metrics(t))
        return times

    def equivalence(self) -> dict[str, Any]:
        """Both methods from the same weights, batch and kept patches: loss and gradients compared."""
        outs = {}
        for method in METHODS:
            model, loss_fn, _ = self.build(method)
            env.seed_everything(SEED + 1)
            x, y = self.batch()
            env.seed_everything(SEED + 2)  # the same kept patches for both methods
            loss = loss_fn(model(x), y)
            loss.backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            outs[method] = (loss.detach(), grads)
        (la, ga), (lb, gb) = outs["gather"], outs["indexing"]
        loss = equal_outputs(la, lb, rtol=1e-6, atol=1e-7)
        grads = equal_outputs(ga, gb, rtol=1e-5, atol=1e-6)
        return {
            "loss_equal": loss["exact"],
            "loss_close": loss["close"],
            "grad_max_abs_diff": grads["max_abs_diff"],
            "grads_close": grads["close"],
        }
