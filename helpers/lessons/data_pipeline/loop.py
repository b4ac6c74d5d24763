"""The timed runs of ``02_data_pipeline``: the step (toy CNN or a stand-in device), the one clock every row uses
(``timed_loop``), a variant's run, interleaved rounds, the ceiling, the profiled loop, and the arithmetic the
notebook compares with (the sweep's prediction, the bounds).

Every row is timed by one loop (``timed_loop``), the ceiling included, and compared by its mean step
(``summarize``): with N workers batches arrive in waves and the median hides the stall. On a CPU the model's step
is a ``StandIn`` for the accelerator (a fixed time, no CPU). The sweep's expectation is
``predicted_samples_per_s``; ``run_interleaved`` measures variants in rotating rounds.
"""
from __future__ import annotations

import contextlib
import math
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function

from ...measure import device as dv
from ...measure.timing import StepTimes, rotation, torch_threads
from ...measure.training import labelled_step
from ...notebook.budget import OverBudget
from .checks import check_config, check_decode, check_shm, clean_worker_error, shm_bytes, shm_needed_mb
from .data import make_loader, sample_paths, to_device

# -- model and step --------------------------------------------------------------------------------
def toy_cnn(image_size: int = 256, num_classes: int = 10) -> nn.Module:
    """The article's toy CNN: conv 3->30, log2(size) x (conv 30->30 'same', ReLU, max-pool 2), conv 30->10, flatten."""
    if image_size < 2 or image_size & (image_size - 1):
        raise ValueError(f"image_size must be a power of two so the pooling ends at 1x1 (got {image_size})")
    layers: list[nn.Module] = [nn.Conv2d(3, 30, 3, padding="same")]
    for _ in range(int(math.log2(image_size))):
        layers += [nn.Conv2d(30, 30, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2)]
    layers += [nn.Conv2d(30, num_classes, 3, padding="same"), nn.Flatten()]
    return nn.Sequential(*layers)


def make_trainer(image_size: int, device, seed: int = 0):
    """A fresh toy CNN + SGD(lr 0.001, momentum 0.9); returns ``train(x, y) -> loss`` with labelled phases."""
    torch.manual_seed(seed)
    model = toy_cnn(image_size).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    return labelled_step(model, opt, nn.CrossEntropyLoss())


class StandIn:
    """A stand-in for the accelerator on a CPU: a "device step" that takes ``step_ms`` and uses no CPU.

    It sleeps (``time.sleep`` releases the GIL), so DataLoader workers compete with each other for
    the cores, not with the model, as they do beside a GPU. Its numbers are *not* GPU numbers: they
    show the dynamics of an input-bound loop (the sawtooth, the worker sweep, fixes that raise
    throughput) with a device whose step time is fixed and stated.
    """

    def __init__(self, step_ms: float):
        if not isinstance(step_ms, (int, float)) or isinstance(step_ms, bool) or not step_ms > 0:
            raise ValueError(f"the stand-in step time must be a positive number of ms (got {step_ms!r})")
        self.step_ms = float(step_ms)

    def __call__(self, x, y):
        with record_function("stand_in_step"):
            time.sleep(self.step_ms / 1000.0)
        return None

    def __repr__(self) -> str:
        return f"StandIn({self.step_ms:g} ms)"


def stand_in_step_ms(batch_ms: float, num_workers: int, ratio: float = 0.5) -> float:
    """The stand-in's step time: ``ratio`` x the time the baseline's ``num_workers`` workers take per batch
    (``batch_ms``, one process's time per batch, divided by the workers; 0 workers: ``batch_ms``).

    So the baseline with those workers takes about ``1 / ratio`` x the stand-in step (input-bound) on any
    core count: ``ratio x batch_ms`` alone would make 4 workers on an 8-core laptop twice as fast as the device.
    """
    if not batch_ms > 0 or not 0 < ratio <= 1:
        raise ValueError(f"need batch_ms > 0 and 0 < ratio <= 1 (got {batch_ms!r}, {ratio!r})")
    return ratio * batch_ms / max(int(num_workers), 1)


def make_step(crop: int, device, seed: int = 0, stand_in_ms: float | None = None) -> Callable:
    """The training step of a run: the toy CNN (``make_trainer``), or a ``StandIn`` when ``stand_in_ms`` is set."""
    return StandIn(stand_in_ms) if stand_in_ms is not None else make_trainer(crop, device, seed)


# -- statistics: the comparison sees the stall -----------------------------------------------------
COMPARE = "step_ms_mean"   # what variants are compared by (samples/s is batch / this)


def summarize(times_ms: Sequence[float], batch_size: int, warm_ms: Sequence[float] = ()) -> dict[str, Any]:
    """Metrics of the timed steps: mean (the comparison), median and quartiles (extra columns).

    With N workers batches arrive in waves (a long step, then N-1 short ones): the median is a short
    step and hides the stall; the mean, and ``samples_per_s`` over the whole timed window, do not.
    """
    if not times_ms:
        raise ValueError("no timed steps to summarise")
    times = [float(t) for t in times_ms]
    m = StepTimes(times_ms=times, first_ms=float(warm_ms[0]) if len(warm_ms) else None).metrics(batch_size)
    m["step_ms_max"] = round(max(times), 3)
    m["warmup_ms"] = [round(t, 2) for t in warm_ms]
    m["times_ms"] = [round(t, 3) for t in times]
    return m


def comparison_ms(metrics: Mapping[str, Any]) -> float:
    """The step time variants are compared by (``COMPARE``: the mean)."""
    return float(metrics[COMPARE])


def cycle_steps(num_workers: int, cycles: int, at_least: int = 1) -> int:
    """Steps covering at least ``cycles`` full worker cycles (one cycle = ``num_workers`` batches, one
    per worker), at least ``at_least``, rounded up to whole cycles."""
    n = max(int(num_workers), 1)
    k = max(int(cycles) * n, int(at_least), 1)
    return -(-k // n) * n


def cycle_means(times_ms: Sequence[float], num_workers: Any) -> list[float]:
    """The mean step of each full worker cycle (``num_workers`` consecutive steps; one step with 0 workers), in order;
    an incomplete last cycle is left out. These are the samples comparisons resample: a cycle holds one long step and
    N-1 short ones, and its mean has none of the sawtooth's step-to-step swing, so the interval reflects the
    machine's noise, not the waves."""
    n = num_workers if isinstance(num_workers, int) and not isinstance(num_workers, bool) and num_workers > 0 else 1
    return [round(float(np.mean(times_ms[i:i + n])), 3) for i in range(0, len(times_ms) - n + 1, n)]


def predicted_samples_per_s(num_workers: int, batch_ms: float, step_ms: float, batch_size: int) -> float:
    """Throughput the per-batch pipeline cost predicts: ``batch × min(N ÷ T_batch, 1 ÷ T_step)``.

    With 0 workers the main process prepares each batch and then steps: ``batch ÷ (T_batch + T_step)``.
    (Assumes the workers have a core each; past the core count they share them.)
    """
    if batch_ms <= 0 or step_ms <= 0:
        raise ValueError("batch_ms and step_ms must be positive")
    if num_workers == 0:
        return batch_size * 1000.0 / (batch_ms + step_ms)
    return batch_size * 1000.0 * min(num_workers / batch_ms, 1.0 / step_ms)


def bound_ms(variant: str, ceiling_ms: float, decode_bound_ms: float) -> float:
    """The fastest step a variant can reach: the ceiling, and for a pipeline whose workers decode the JPEGs on the
    CPU, also the decode bound (``max`` of the two). ``gpu_decode`` decodes on the GPU: the CPU decode bound says
    nothing about it (a step below it is no sign of being near its own bound), so its bound is the ceiling."""
    if ceiling_ms <= 0 or decode_bound_ms <= 0:
        raise ValueError("ceiling_ms and decode_bound_ms must be positive")
    return ceiling_ms if variant == "gpu_decode" else max(ceiling_ms, decode_bound_ms)



def _copy_overlapped(batch, variant: str, dev, crop, stream):
    """Issue ``to_device`` of ``batch`` on a side CUDA stream (returns at once: the copy runs beside compute)."""
    with torch.cuda.stream(stream):
        return to_device(batch, variant, dev, crop)


def _main_threads(dev: torch.device, num_workers: int) -> int | None:
    return 1 if (num_workers == 0 or dev.type != "cuda") else None


def timed_loop(batches, step: Callable, device, *, variant: str, crop: int | None, steps: int, warmup: int,
               overlap_copy: bool = False) -> tuple[list[float], list[float], list[float], torch.Tensor]:
    """The one clock every row of notebook 02 uses (the ceiling too).

    Each step: ``next(batches)`` (the wait for data), ``to_device``, ``step(x, y)``, synchronise the
    device, read ``time.perf_counter``. A step's time runs from the end of the previous step to the end
    of this one, so it includes the wait. With ``overlap_copy`` (CUDA only) the next batch is fetched
    and copied (non-blocking, on a side stream, from pinned memory) while this step's kernels run.
    Returns ``(timed step ms, timed wait ms, warm-up step ms, last x)``.
    """
    dev = torch.device(device)
    if overlap_copy and dev.type != "cuda":
        raise ValueError("overlap_copy overlaps a host-to-device copy with device compute: it needs a CUDA device")
    times, waits, warm = [], [], []
    stream = torch.cuda.Stream(dev) if overlap_copy else None
    t_prev = time.perf_counter()
    cur = _copy_overlapped(next(batches), variant, dev, crop, stream) if overlap_copy else None
    x = None
    for i in range(warmup + steps):
        if overlap_copy:
            torch.cuda.current_stream(dev).wait_stream(stream)
            x, y = cur
            for t in (x, y):
                t.record_stream(torch.cuda.current_stream(dev))
            step(x, y)                       # queued on the default stream; the CPU goes on at once
            t0 = time.perf_counter()
            nxt = next(batches) if i + 1 < warmup + steps else None
            t_data = time.perf_counter()
            if nxt is not None:
                cur = _copy_overlapped(nxt, variant, dev, crop, stream)
            wait_ms = (t_data - t0) * 1000.0
        else:
            batch = next(batches)
            t_data = time.perf_counter()
            wait_ms = (t_data - t_prev) * 1000.0
            x, y = to_device(batch, variant, dev, crop)
            step(x, y)
        dv.synchronize(dev)
        t_end = time.perf_counter()
        if i < warmup:
            warm.append((t_end - t_prev) * 1000.0)
        else:
            times.append((t_end - t_prev) * 1000.0)
            waits.append(wait_ms)
        t_prev = t_end
    return times, waits, warm, x


def run_variant(variant: str = "baseline", num_workers: int = 0, batch_size: int = 16, steps: int = 10, *,
                warmup: int = 2, crop: int = 64, device=None, paths: Sequence[Path | str] | None = None,
                dataset_size: int | None = None, pin_memory: bool | None = None, prefetch_factor: int | None = None,
                persistent_workers: bool = False, die_at: int | None = None, seed: int = 0,
                max_workers: int | None = None, train: bool = True, stand_in_ms: float | None = None,
                overlap_copy: bool = False, check_shared_memory: bool = True) -> dict[str, Any]:
    """Train for ``warmup + steps`` steps fed by the variant's DataLoader; time each step (``timed_loop``).

    The step is the toy CNN, or with ``stand_in_ms`` a ``StandIn`` (a fixed-time device step that uses
    no CPU); ``train=False`` skips it (the pipeline alone). The first ``warmup`` steps are reported
    apart: the first holds the workers' start-up, and the first worker cycle arrives as one burst.
    Variants are compared by the mean step (``samples_per_s`` over the whole timed window); median and
    quartiles are extra columns. ``data_wait_share`` is the share of the timed window spent in
    ``next()``. Peak device memory is reset first, so it is this row's. With workers, /dev/shm is
    checked first (``check_shm``); ``gpu_decode`` is checked against the CPU decode before it is timed.
    With ``num_workers=0``, or on a CPU, the main process runs with one intra-op thread, as a worker does
    (``torch_threads``).
    Returns the metrics dict of a results row.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    check_config(variant, num_workers, batch_size, dev, max_workers)
    if steps < 1 or warmup < 0:
        raise ValueError("steps must be at least 1 and warmup at least 0")
    paths = list(paths) if paths is not None else sample_paths()
    if num_workers > 0 and check_shared_memory:
        pinned = (dev.type == "cuda") if pin_memory is None else bool(pin_memory)
        check_shm(shm_needed_mb(num_workers, batch_size, crop, prefetch_factor=prefetch_factor,
                                bytes_per_value=shm_bytes(variant), pinned=pinned))
    decode_check = check_decode(paths[:4], dev) if variant == "gpu_decode" else None
    needed = (warmup + steps + 1) * batch_size
    length = max(dataset_size or 0, needed)
    loader = make_loader(variant, num_workers, batch_size, crop=crop, length=length, paths=paths, device=dev,
                         pin_memory=pin_memory, prefetch_factor=prefetch_factor,
                         persistent_workers=persistent_workers, die_at=die_at, seed=seed)
    step = make_step(crop, dev, seed, stand_in_ms) if train else (lambda x, y: None)
    dv.reset_peak_memory(dev)
    it = iter(loader)
    error = None
    try:
        with torch_threads(_main_threads(dev, num_workers)):
            times, waits, warm, x = timed_loop(it, step, dev, variant=variant, crop=crop, steps=steps, warmup=warmup,
                                               overlap_copy=overlap_copy)
    except Exception as exc:  # noqa: BLE001 - re-raised with a readable message, below
        # The failure's frames hold the iterator in a reference cycle (torch's reraise). Left to the garbage
        # collector, its index queues can be finalised before it, so the "stop" it sends its workers never leaves
        # and each waits out the DataLoader's 5 s timeout. Cleared here, the iterator goes at `del it`, at once.
        traceback.clear_frames(exc.__traceback__)
        error = clean_worker_error(exc).with_traceback(None)
    finally:
        del it
    if error is not None:
        raise error from None
    m = summarize(times, batch_size, warm)
    m["data_wait_ms_median"] = round(float(np.median(waits)), 3)
    m["data_wait_share"] = round(sum(waits) / sum(times), 4)
    m["peak_mem_mb"] = dv.peak_memory_mb(dev)
    m["x_shape"] = list(x.shape)
    m["x_dtype"] = str(x.dtype)
    if decode_check is not None:
        m["decode_vs_cpu_mean_abs"] = round(decode_check["mean_abs"], 3)
    return m


def run_interleaved(configs: Mapping[str, Mapping[str, Any]], rounds: int, guard: Callable[[], Any] | None = None,
                    **common) -> dict[str, Any]:
    """Run each configuration (``run_variant`` keyword arguments, over ``common``) ``rounds`` times, in
    rotating order (A B C, B C A, C A B, ...), and pool each one's timed steps. A configuration with
    ``variant="ceiling"`` is the ceiling (``ceiling``: a batch already on the device), timed in the same rounds.

    On a shared machine the load drifts; run one after the other, a variant is judged by the load of its
    moment. Interleaved, a burst of someone else's work hits every variant alike. Returns
    ``{name: metrics}`` (``summarize`` of the pooled steps; first step and warm-up from the first round),
    or ``{name: exception}`` for a configuration that failed (it is not run again).

    ``guard``: a time budget's ``limit`` (``helpers.notebook.budget``), around each run. When it raises ``OverBudget``
    the rounds end there: the run it stopped (or skipped) fails with that message, and every other configuration
    with a message saying in which round the budget ran out (a row is kept only with all its rounds).
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    names = list(configs)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    failed: dict[str, BaseException] = {}
    for r, name in rotation(names, rounds):
        if name in failed:
            continue
        try:
            kw = {**common, **configs[name]}
            with guard() if guard is not None else contextlib.nullcontext():
                runs[name].append(_ceiling_of(kw) if kw.get("variant") == "ceiling" else run_variant(**kw))
        except OverBudget as exc:
            cut = OverBudget(f"skipped: the time budget ran out in round {r + 1} of {rounds} of these interleaved "
                             f"rows (a row is kept only with all its rounds)") if any(runs.values()) else exc
            failed = {n: failed.get(n, exc if n == name else cut) for n in names}
            break
        except Exception as exc:  # noqa: BLE001 - reported as this configuration's failure
            failed[name] = exc
    out: dict[str, Any] = {}
    for name in names:
        if name in failed:
            out[name] = failed[name]
            continue
        ms = runs[name]
        times = [t for m in ms for t in m["times_ms"]]
        batch = (common | dict(configs[name])).get("batch_size", 16)
        m = summarize(times, batch, ms[0]["warmup_ms"])
        if all("data_wait_share" in x for x in ms):
            m["data_wait_share"] = round(sum(x["data_wait_share"] * sum(x["times_ms"]) for x in ms) / sum(times), 4)
        mems = [x["peak_mem_mb"] for x in ms if x.get("peak_mem_mb") is not None]
        m["peak_mem_mb"] = max(mems) if mems else None
        m["rounds"] = len(ms)
        m["round_means_ms"] = [x["step_ms_mean"] for x in ms]
        # each round is one loader run: its steps, warm-up first, make one sawtooth (rounds are never joined)
        m["round_times_ms"] = [x["times_ms"] for x in ms]
        m["round_warmup_ms"] = [x["warmup_ms"] for x in ms]
        nw = (common | dict(configs[name])).get("num_workers", 0)
        m["cycle_ms"] = [c for x in ms for c in cycle_means(x["times_ms"], nw)]
        for k in ("x_shape", "x_dtype", "decode_vs_cpu_mean_abs"):
            if k in ms[-1]:
                m[k] = ms[-1][k]
        out[name] = m
    return out


def _ceiling_of(kw: Mapping[str, Any]) -> dict[str, Any]:
    """``ceiling`` with the arguments of a ``run_variant`` configuration (those it has no use for are dropped)."""
    return ceiling(kw.get("batch_size", 16), kw.get("crop", 64), steps=kw.get("steps", 10), warmup=kw.get("warmup", 2),
                   device=kw.get("device"), seed=kw.get("seed", 0), stand_in_ms=kw.get("stand_in_ms"))


def ceiling(batch_size: int, crop: int, steps: int = 10, warmup: int = 2, device=None, seed: int = 0,
            stand_in_ms: float | None = None) -> dict[str, Any]:
    """The same step fed one batch already on the device, timed by the same ``timed_loop`` (same clock):
    the fastest this loop can go. Returns the metrics of a results row (``summarize``)."""
    import itertools

    dev = torch.device(device) if device is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch_size, 3, crop, crop, generator=g).to(dev)
    y = torch.randint(0, 10, (batch_size,), generator=g).to(dev)
    step = make_step(crop, dev, seed, stand_in_ms)
    dv.reset_peak_memory(dev)
    with torch_threads(_main_threads(dev, 0) if stand_in_ms is not None else None):
        times, waits, warm, _ = timed_loop(itertools.repeat((x, y)), step, dev, variant="ceiling", crop=crop,
                                           steps=steps, warmup=warmup)
    m = summarize(times, batch_size, warm)
    m["peak_mem_mb"] = dv.peak_memory_mb(dev)
    return m


def per_sample_ms(fn: Callable[[], Any], repeats: int = 20) -> float:
    """Median wall time of ``fn()`` in ms over ``repeats`` calls (after one warm-up call)."""
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1000.0)
    return float(np.median(ts))


def profile_loop(variant: str, num_workers: int, batch_size: int, *, crop: int, trace_dir, device=None,
                 warmup: int = 1, active: int = 2, cycles: int = 2, paths=None, seed: int = 0,
                 stand_in_ms: float | None = None):
    """Profile training steps fed by the variant's DataLoader into ``trace_dir``.

    The first worker cycle (``num_workers`` batches that arrive as one burst after start-up) is
    skipped (``wait``), then ``warmup`` steps, then at least ``cycles`` full worker cycles are
    recorded (``active`` at least), so the trace's wait share is the steady state's, not the burst's.
    With ``num_workers=0`` the per-transform ``record_function`` labels run in this process and
    appear in the profile; with workers they run elsewhere and only the wait in ``__next__`` shows.
    """
    from ...measure.profiling import profile_steps

    dev = torch.device(device) if device is not None else torch.device("cpu")
    check_config(variant, num_workers, batch_size, dev)
    if num_workers > 0:   # as run_variant: refuse before a worker starts (a full /dev/shm kills them with SIGBUS)
        check_shm(shm_needed_mb(num_workers, batch_size, crop, bytes_per_value=shm_bytes(variant),
                                pinned=dev.type == "cuda"))
    wait = num_workers
    active = max(active, cycle_steps(num_workers, cycles) if num_workers else active)
    loader = make_loader(variant, num_workers, batch_size, crop=crop,
                         length=(wait + warmup + active + 1) * batch_size, paths=paths, device=dev, seed=seed)
    train = make_step(crop, dev, seed, stand_in_ms)
    it = iter(loader)

    def step():
        x, y = to_device(next(it), variant, dev, crop)
        train(x, y)

    try:
        with torch_threads(_main_threads(dev, num_workers)):
            prof = profile_steps(step, wait=wait, warmup=warmup, active=active, device=dev, trace_dir=trace_dir)
    except Exception as exc:  # noqa: BLE001
        raise clean_worker_error(exc) from None
    finally:
        del it
    prof.steps_recorded = active
    return prof


def gpu_idle_share(trace_dir) -> float | None:
    """Holistic Trace Analysis' idle share (0..1) of the GPU in the profiled window of ``trace_dir`` (a
    ``tensorboard_trace_handler`` folder or a trace file), read through ``helpers.traces`` so that HTA's parse
    chatter and its "no rank in the trace" warning stay out of the notebook. None for a CPU-only trace."""
    from ...traces import open_trace

    b = open_trace(trace_dir, max_steps=None).gpu_breakdown()
    return None if b is None else b["idle_pct"] / 100.0


# -- reading the pipeline's profile ----------------------------------------------------------------
PROFILE_SORT = "cpu_time_total"   # the transform labels have no device time: sort by CPU time, on a GPU too

# record_function labels -> the stage they belong to (for the per-variant stacked bar)
STAGES = {"load_image": "decode JPEG", "read_bytes": "read file", "PILToTensor": "to tensor",
          "RandomCrop": "crop", "PILRandomCrop": "crop", "RandomMask": "mask", "ConvertColor": "colour",
          "ConvertColor(batch)": "colour", "Scale": "scale", "Scale(batch)": "scale", "collate": "collate",
          "to_device": "to device"}


def profile_table(prof, row_limit: int = 12, name_width: int = 32) -> str:
    """The pipeline profile's table (``key_averages().table``), sorted by CPU time (``PROFILE_SORT``) whatever the
    device, its names cut at ``name_width`` characters so that on a CPU its lines fit a notebook's output area."""
    from ...measure import profiling

    return profiling.host_averages(prof).table(sort_by=PROFILE_SORT, row_limit=row_limit,
                                               max_name_column_width=name_width)


def stage_ms(label_ms: Mapping[str, float], n_samples: int) -> dict[str, float]:
    """Per-sample ms of each stage (``STAGES``) from ``{label: total CPU ms}`` of a profile."""
    out: dict[str, float] = {}
    for label, stage in STAGES.items():
        out[stage] = out.get(stage, 0.0) + float(label_ms.get(label, 0.0)) / max(n_samples, 1)
    return out
