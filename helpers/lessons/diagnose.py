"""Notebook 05's planted bottlenecks: a small MLP training step with one bottleneck planted at a time, so the
doctor's verdict can be checked against a known cause (and against the step with the plant removed)."""
from __future__ import annotations

from typing import Any, Callable

from ..measure.diagnose import training_step
from ..measure.timing import torch_threads
from ..measure.training import labelled_step
from ..measure.validate import validate_choice

PLANTED = ("none", "input", "launch/overhead", "compute", "host sync")


class SlowDataset:
    """Random samples, each costing ``ms`` of host time (a stand-in for decoding and augmenting)."""

    def __init__(self, n: int, features: int, ms: float):
        self.n, self.features, self.ms = n, features, ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import time

        import torch

        time.sleep(self.ms / 1000.0)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.features, generator=g), int(i % 10)


def planted_step(kind: str, size: float, *, device=None, batch_size: int = 8, features: int = 64,
                 hidden: int = 64, threads: int | None = 1, overlap: int = 0, item: bool = True) -> Callable[[], Any]:
    """A small MLP training step with one bottleneck planted, ``size`` setting how strong it is:

    - ``"none"``: the plain step (the baseline; ``size`` is ignored);
    - ``"input"``: batches come from a DataLoader (``num_workers=0``) whose dataset spends ``size`` ms per sample;
    - ``"launch/overhead"``: the forward adds ``size`` tiny elementwise ops on a 16-element tensor;
    - ``"compute"``: the forward adds one ``size`` × ``size`` matrix product;
    - ``"host sync"``: ``loss.item()`` every step, then ``size`` ms of host work (as when a metric is logged)
      that, without the sync, would overlap with the GPU's work. Only meaningful on a GPU, and only with GPU work
      to overlap with: ``overlap`` adds an ``overlap`` × ``overlap`` matrix product to the forward (on a big GPU
      the small MLP alone takes microseconds, so removing the sync would save nothing). ``item=False`` is the fix:
      the same step and host work without the ``.item()``.

    On a CPU each call runs with ``threads`` intra-op threads (then restores the setting): on a busy shared
    machine, waking OpenMP workers stretches even a tiny op to a scheduler time slice (~16 ms), which would
    bury the planted effect under the machine's load. ``threads=None`` leaves the setting alone.
    """
    import torch

    validate_choice(kind, PLANTED, "planted bottleneck")
    if isinstance(size, bool) or not isinstance(size, (int, float)) or not size > 0:
        raise ValueError(f"size must be a positive number, not {size!r}.")
    device = torch.device(device or "cpu")
    torch.manual_seed(0)
    if isinstance(overlap, bool) or not isinstance(overlap, int) or overlap < 0:
        raise ValueError(f"overlap must be a matrix side (an integer >= 0), not {overlap!r}.")
    extra = {"tiny": int(size) if kind == "launch/overhead" else 0,
             "mm": int(size) if kind == "compute" else (overlap if kind == "host sync" else 0)}

    class Planted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                           torch.nn.Linear(hidden, 10))
            if extra["mm"]:
                self.big = torch.nn.Parameter(torch.randn(extra["mm"], extra["mm"]) / extra["mm"] ** 0.5)
            self.tiny = torch.nn.Parameter(torch.ones(16))

        def forward(self, x):
            out = self.net(x)
            if extra["tiny"]:
                t = self.tiny
                for _ in range(extra["tiny"]):
                    t = t * 1.0001
                out = out + t.sum() * 0.0
            if extra["mm"]:
                out = out + (self.big @ self.big).mean() * 0.0
            return out

    model = Planted().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = labelled_step(model, opt, torch.nn.functional.cross_entropy)
    if kind == "input":
        loader = torch.utils.data.DataLoader(SlowDataset(10_000, features, float(size)), batch_size=batch_size,
                                             shuffle=False, num_workers=0)
        inner = training_step(model, opt, loader, device=device)
        return _with_threads(inner, threads) if device.type == "cpu" else inner
    x = torch.randn(batch_size, features, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    if kind == "host sync":
        import time

        def run():
            loss = step(x, y)
            if item:
                loss.item()                  # the planted sync: the host waits for the GPU here
            time.sleep(float(size) / 1000.0)  # host work that could have overlapped with the GPU
            return loss
        inner = run
    else:
        def inner():
            return step(x, y)
    return _with_threads(inner, threads) if device.type == "cpu" else inner


def _with_threads(fn: Callable[[], Any], threads: int | None) -> Callable[[], Any]:
    def run():
        with torch_threads(threads):
            return fn()
    return run
