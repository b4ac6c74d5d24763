"""Notebook 02's runs: the stand-in device, interleaved rows (``measure``) compared by worker-cycle means, profiles,
idle shares and the panel. The DataLoader loop is the notebook's own (its ``run``)."""

import contextlib
import functools
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.profiler import record_function

from ...measure import device as dv, profiling, validate as vd
from ...measure.timing import StepTimes, rotation, torch_threads
from ...measure.training import labelled_step
from ...notebook import tensorboard as tb
from ...notebook.display import readable
from ...notebook.budget import OverBudget
from .transforms import VARIANTS

# record_function labels -> the stage they belong to (per sample, in the single-process profiles)
STAGES = {
    "load_image": "decode JPEG",
    "read_bytes": "read file",
    "PILToTensor": "to tensor",
    "RandomCrop": "crop",
    "RandomMask": "mask",
    "ConvertColor": "colour",
    "ConvertColor(batch)": "colour",
    "Scale": "scale",
    "Scale(batch)": "scale",
    "collate": "collate",
    "to_device": "to device",
}
# what the panel's table shows of each row
PANEL_METRICS = ["step_ms_mean", "samples_per_s", "step_ms_median"]


def toy_cnn(image_size: int = 256, num_classes: int = 10) -> nn.Module:
    """The article's toy CNN: conv 3->30, log2(size) x (conv 30->30, ReLU, max-pool 2), conv 30->10, flatten."""
    if image_size < 2 or image_size & (image_size - 1):
        # the pooling ends at 1x1
        raise ValueError(f"image_size must be a power of two (got {image_size})")
    layers: list[nn.Module] = [nn.Conv2d(3, 30, 3, padding="same")]
    for _ in range(int(math.log2(image_size))):
        layers += [nn.Conv2d(30, 30, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*layers, nn.Conv2d(30, num_classes, 3, padding="same"), nn.Flatten())


def make_trainer(image_size: int, device, seed: int = 0):
    """``step(x, y)`` of a fresh toy CNN with SGD (lr 0.001, momentum 0.9), its phases labelled."""
    torch.manual_seed(seed)
    model = toy_cnn(image_size).to(device)
    return labelled_step(
        model, torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9), nn.CrossEntropyLoss()
    )


class StandIn:
    """The accelerator's step on a CPU: it sleeps ``step_ms`` (releasing the GIL), using no core (not a GPU figure)."""

    def __init__(self, step_ms: float):
        if isinstance(step_ms, bool) or not isinstance(step_ms, (int, float)) or not step_ms > 0:
            raise ValueError(f"the stand-in step must be a positive number of ms (got {step_ms!r})")
        self.step_ms = float(step_ms)

    def __call__(self, x, y):
        with record_function("stand_in_step"):
            time.sleep(self.step_ms / 1000.0)


def summarize(times_ms, batch_size: int, warm_ms=(), waits_ms=None) -> dict[str, Any]:
    """A row's metrics: mean step, samples/s, median, quartiles, first step, the steps, the share spent waiting."""
    if not len(times := [float(t) for t in times_ms]):
        raise ValueError("no timed steps to summarise")
    first = float(warm_ms[0]) if len(warm_ms) else None
    m = StepTimes(times_ms=times, first_ms=first).metrics(batch_size)
    m.update(
        step_ms_max=round(max(times), 3),
        warmup_ms=[round(t, 2) for t in warm_ms],
        times_ms=[round(t, 3) for t in times],
    )
    if waits_ms is not None:
        m["data_wait_share"] = round(sum(waits_ms) / sum(times), 4)
    return m


def cycle_steps(num_workers: int, cycles: int, at_least: int = 1) -> int:
    """Steps covering at least ``cycles`` full worker cycles (one batch from each worker), at least ``at_least``."""
    n = max(int(num_workers), 1)
    return -(-max(int(cycles) * n, int(at_least), 1) // n) * n


def cycle_means(times_ms, num_workers) -> list[float]:
    """The mean step of each full worker cycle: the samples comparisons resample, free of the sawtooth's swing."""
    n = num_workers if isinstance(num_workers, int) and num_workers > 0 else 1
    return [
        round(float(np.mean(times_ms[i : i + n])), 3) for i in range(0, len(times_ms) - n + 1, n)
    ]


def predicted_samples_per_s(num_workers, batch_ms, step_ms, batch_size) -> float:
    """``batch x min(N / T_batch, 1 / T_step)``; with 0 workers ``batch / (T_batch + T_step)``."""
    if batch_ms <= 0 or step_ms <= 0:
        raise ValueError("batch_ms and step_ms must be positive")
    if num_workers == 0:
        return batch_size * 1000.0 / (batch_ms + step_ms)
    return batch_size * 1000.0 * min(num_workers / batch_ms, 1.0 / step_ms)


def bound_ms(variant: str, ceiling_ms: float, decode_bound_ms: float) -> float:
    """The fastest step a variant can reach: the ceiling, or the CPU decode bound where its workers decode."""
    if ceiling_ms <= 0 or decode_bound_ms <= 0:
        raise ValueError("ceiling_ms and decode_bound_ms must be positive")
    return ceiling_ms if variant == "gpu_decode" else max(ceiling_ms, decode_bound_ms)


def failing(exc: BaseException) -> Callable[[], Any]:
    """A ``Results.record`` function that raises ``exc``: a failed row with its message."""
    return lambda: (_ for _ in ()).throw(exc)


def _plan(kw: dict[str, Any], rounds: int, cycles: int, warmup: int) -> dict[str, Any]:
    """A round's steps: a ``rounds``-th, in whole worker cycles, after a warm-up of at least one cycle."""
    nw, steps = kw.get("num_workers", 0), max(1, kw.get("steps", 1) // rounds)
    if isinstance(nw, int) and not isinstance(nw, bool):
        if kw.get("train", True) or nw:
            steps = cycle_steps(nw, cycles, steps)
        # a row's own warm-up (the pipeline alone: 0 at full scale), at least one worker cycle
        warmup = max(kw.get("warmup", warmup), nw)
    return {**kw, "steps": steps, "warmup": warmup}


def measure(
    results,
    rows: Mapping[str, Mapping[str, Any]],
    run: Callable[..., dict],
    *,
    rounds: int = 1,
    cycles: int = 1,
    warmup: int = 1,
    budget=None,
    device=None,
    defaults: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    quiet: bool = False,
    tb_dir=None,
) -> None:
    """``rows`` ({name: ``run`` kwargs over ``defaults``}) measured in ``rounds`` rotating rounds, pooled into a row
    each and logged to TensorBoard (into ``tb_dir``: ``tensorboard.notebook_logdir``). A failed row is not rerun;
    once the budget is spent every row left fails."""
    plans = {n: _plan({**(defaults or {}), **kw}, rounds, cycles, warmup) for n, kw in rows.items()}
    runs: dict[str, list] = {n: [] for n in rows}
    failed: dict[str, BaseException] = {}
    for r, name in rotation(list(rows), rounds):
        if name in failed:
            continue
        try:
            with budget.limit() if budget is not None else contextlib.nullcontext():
                dv.reset_peak_memory(device)
                runs[name].append({**run(**plans[name]), "peak_mem_mb": dv.peak_memory_mb(device)})
        except OverBudget as exc:
            cut = exc
            if any(runs.values()):
                cut = OverBudget(
                    f"skipped: the time budget ran out in round {r + 1} of {rounds} of these interleaved "
                    "rows (a row is kept only with all its rounds)"
                )
            failed = {n: failed.get(n, exc if n == name else cut) for n in rows}
            break
        except Exception as exc:  # noqa: BLE001 - this row's failure, with its message
            failed[name] = exc
    config = dict(config or {})
    sim = config.get("stand_in_ms")  # the stand-in's step, or None
    for name, kw in plans.items():
        model = kw.get("train", True)
        cfg = {
            k: v
            for k, v in {**kw, **config}.items()
            if k not in ("steps", "warmup", "train", "paths")
        }
        cfg |= dict(
            model=model, stand_in=model and sim is not None, stand_in_ms=sim if model else None
        )
        cfg |= dict(timed_steps=kw["steps"], warmup_steps=kw["warmup"], rounds=rounds)
        if name in failed:
            fn = failing(failed[name])
        else:
            fn = functools.partial(_pool, results, name, cfg, runs[name], tb_dir)
        # skipped: said once (views.skipped); quiet: the caller shows the failures
        verbose = not quiet and not isinstance(failed.get(name), OverBudget)
        results.record(name, cfg, fn, verbose=verbose)


def _pool(results, name: str, cfg: dict, ms: list[dict], tb_dir) -> dict[str, Any]:
    times = [t for m in ms for t in m["times_ms"]]
    m = summarize(times, cfg["batch_size"], ms[0]["warmup_ms"])
    if all("data_wait_share" in x for x in ms):
        waited = sum(x["data_wait_share"] * sum(x["times_ms"]) for x in ms)
        m["data_wait_share"] = round(waited / sum(times), 4)
    mems = [x["peak_mem_mb"] for x in ms if x.get("peak_mem_mb") is not None]
    m.update(
        peak_mem_mb=max(mems, default=None),
        rounds=len(ms),
        round_means_ms=[x["step_ms_mean"] for x in ms],
        round_times_ms=[x["times_ms"] for x in ms],
        round_warmup_ms=[x["warmup_ms"] for x in ms],
        cycle_ms=[c for x in ms for c in cycle_means(x["times_ms"], cfg["num_workers"])],
    )
    ceiling = {"status": "ok", "config": cfg, "metrics": m}
    if name != "ceiling":
        ceiling = results.get("ceiling")
    if cfg["model"] and ceiling and ceiling["status"] == "ok":
        if ceiling["config"]["batch_size"] == cfg["batch_size"]:
            m["ceiling_ms"] = ceiling["metrics"]["step_ms_mean"]
            m["x_ceiling"] = round(m["step_ms_mean"] / m["ceiling_ms"], 3)
    tb.log_experiment(
        results.notebook,
        name,
        cfg,
        m,
        step_times_ms=times,
        batch_size=cfg["batch_size"],
        root=tb_dir,
    )
    return m


def compare(results, a: str, b: str) -> dict[str, Any] | None:
    """Rows ``a`` and ``b`` of the same rounds compared by their worker cycles' means (the mean, not the median);
    None when a row failed."""
    ta, tb_ = (results.metric(n, "cycle_ms") or results.metric(n, "times_ms") for n in (a, b))
    return results.compare_times(a, b, ta, tb_) if ta and tb_ else None


def profile(run: Callable[..., Any], trace_dir, *, wait: int, active: int, device, **kw):
    """``run(**kw)`` profiled (``wait``, one warm-up, ``active`` into ``trace_dir``) on one intra-op thread, as a
    worker runs its transforms."""
    from torch.profiler import profile as torch_profile, schedule, tensorboard_trace_handler

    profiling.quiet_profiler_warning()
    with torch_profile(
        activities=profiling.activities(device),
        schedule=schedule(wait=wait, warmup=1, active=active, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(trace_dir)),
    ) as prof:
        if dv.is_cuda(device):
            # the trace says its loop synchronised every step (perf_doctor reads it)
            prof.preset_metadata_json(profiling.LOOP_SYNC_METADATA, "1")
        with torch_threads(1):
            run(steps=wait + 1 + active, warmup=0, on_step=prof.step, **kw)
    return prof


def stage_ms(prof, n_samples: int) -> dict[str, float]:
    """Per-sample ms of each stage (``STAGES``) in a single-process profile."""
    totals = profiling.label_totals(prof, list(STAGES))
    return {
        st: sum(ms for label, ms in totals.items() if STAGES[label] == st) / max(n_samples, 1)
        for st in dict.fromkeys(STAGES.values())
    }


def idle_shares(
    results, run, variants, *, num_workers, windows, cycles, device, budget=None, config=None
):
    """Per variant, the loop's share of time in the DataLoader's ``__next__`` over ``windows`` profiled windows in
    turns (on a GPU also HTA's idle share); a row ``idle share <variant>`` each."""
    from perf_doctor import dataloader_wait_share, load_trace

    got: dict[str, list] = {v: [] for v in variants}
    failed: dict[str, BaseException] = {}
    for v in [v for _ in range(windows) for v in variants]:
        if v in failed:
            continue
        tdir = profiling.fresh_trace_dir(f"{results.notebook}/{v}_nw{num_workers}")
        try:
            with budget.limit() if budget is not None else contextlib.nullcontext():
                active = cycle_steps(num_workers, cycles)
                kw = dict(variant=v, num_workers=num_workers)
                profile(run, tdir, wait=num_workers, active=active, device=device, **kw)
            share = dataloader_wait_share(load_trace(profiling.trace_files(tdir)[0]))
            gpu = gpu_idle_share(tdir) if dv.is_cuda(device) else None
            got[v].append({**share, "dir": str(tdir), "gpu": gpu})
        except (Exception, OverBudget) as exc:  # noqa: BLE001 - a failed row
            failed[v] = exc
    out = {}
    for v, ws in got.items():
        nxt, step = (sum(w[k] for w in ws) for k in ("next_ms", "step_ms"))
        gpu = [w["gpu"] for w in ws]
        if v not in failed:
            out[v] = {
                "trace_dir": ws[0]["dir"],
                "trace_wait_share": round(nxt / step, 4),
                "next_ms": round(nxt, 3),
                "profiled_step_ms": round(step, 3),
                "windows": len(ws),
                "cycles_per_window": cycles,
            }
            if None not in gpu:
                out[v]["gpu_idle_share"] = round(float(np.mean(gpu)), 4)
        fn = failing(failed[v]) if v in failed else functools.partial(out.get, v)
        cfg = {"variant": v, "num_workers": num_workers, **(config or {})}
        verbose = not isinstance(failed.get(v), OverBudget)
        results.record(f"idle share {v}", cfg, fn, verbose=verbose)
    return out


def gpu_idle_share(trace_dir) -> float | None:
    """HTA's GPU idle share (0..1) of a trace; None for a CPU trace or when HTA cannot read it."""
    from perf_doctor import open_trace

    try:
        b = open_trace(trace_dir, max_steps=None).gpu_breakdown()
    except Exception as exc:  # noqa: BLE001 - optional analysis
        print(f"HTA could not analyse {trace_dir}: {exc}")
        return None
    return None if b is None else b["idle_pct"] / 100.0


def validate_panel(v: dict[str, Any], cores: int, on_gpu: bool) -> dict[str, Any]:
    """The panel's values, refused with a one-line message (``validate.check_values``) before anything runs."""
    spec = {
        "variant": vd.Choice(VARIANTS, "pipeline variant"),
        "num_workers": functools.partial(_num_workers, cores=cores),
        "batch_size": vd.Whole(1, 1024, "batch size"),
        "persistent_workers": bool,
    }
    vd.check_values(v, spec)
    if v["variant"] == "gpu_decode" and not on_gpu:
        raise vd.InvalidValue("gpu_decode needs a CUDA device; this run is on the CPU.")
    return v


def _num_workers(value: Any, name: str, device=None, *, cores: int) -> int:
    return vd.validate_num_workers(value, cores)


def panel_row(results, measure_row, cores: int, on_gpu: bool, prefix: str = "panel", **values):
    """``measure_row(name, values)`` of the checked values (a refused one: a failed row named ``prefix ...``); the
    panel's table (the baseline and the rows named ``panel ...``)."""
    try:
        validate_panel(dict(values), cores, on_gpu)
        name = f"{prefix} " + "{variant} nw={num_workers} bs={batch_size}".format(**values)
        if values.get("persistent_workers") is True:
            name += " persistent"
        measure_row(name, values)
    except ValueError as exc:
        name = f"{prefix} " + " ".join(f"{k}={v!r}" for k, v in values.items())
        cfg = {k: str(v) for k, v in values.items()} | {"model": True}
        results.record(name, cfg, failing(exc), verbose=prefix == "panel")
    return panel_table(results)


def bad_inputs(results, measure_rows, sample: Path, cores: int, on_gpu: bool, panel_values: dict):
    """The appendix's expected failures, each a failed row with its message (never skipped for time): impossible
    settings, a corrupt and a missing image (in a temporary folder, named so in the table), a dying worker, too
    little /dev/shm, and the panel's function called with bad values. Returns their table."""
    import tempfile

    from .transforms import check_shm, shm_needed_mb

    with tempfile.TemporaryDirectory(prefix="nb02_") as tmp:
        # a truncated JPEG
        Path(tmp, "corrupt.jpg").write_bytes(Path(sample).read_bytes()[:2000])
        bad = {
            "num_workers > cores": dict(num_workers=cores + 1),
            "num_workers < 0": dict(num_workers=-1),
            "batch size 0": dict(batch_size=0),
            "corrupt image": dict(num_workers=1, paths=[Path(tmp, "corrupt.jpg")]),
            "missing image": dict(num_workers=0, paths=[Path(tmp, "missing.jpg")]),
            "a worker dies": dict(num_workers=1, die_at=1),
        }
        every = dict(variant="crop_first", steps=1)
        measure_rows({f"expected failure: {k}": every | kw for k, kw in bad.items()})
    results.record(
        "expected failure: /dev/shm too small (64 MiB, the article's size)",
        dict(variant="baseline", num_workers=4, batch_size=256, crop=256),
        lambda: {"free_mb": check_shm(shm_needed_mb(4, 256, 256), free_mb=64)},
        verbose=False,
    )
    for wrong in (dict(num_workers="2"), dict(batch_size=True), dict(persistent_workers="yes")):
        values = panel_values | wrong
        panel_row(results, None, cores, on_gpu, prefix="expected failure: panel", **values)
    rows = [e for e in results.experiments if e["name"].startswith("expected failure")]
    table = pd.DataFrame(rows)[["name", "status", "error"]]
    return table.assign(error=table["error"].str.replace(tmp, "<a temporary folder>", regex=False))


def panel(results, measure_row, *, num_workers: int, batch_size: int, cores: int, on_gpu: bool):
    """The "try it yourself" panel (``helpers.notebook.panels.run_panel``) over ``panel_row``."""
    import ipywidgets as w

    from ...notebook.panels import run_panel

    controls = {
        "num_workers": w.BoundedIntText(num_workers, min=-1, max=64, description="num_workers"),
        "variant": w.Dropdown(options=list(VARIANTS), value="crop_first", description="variant"),
        "batch_size": w.BoundedIntText(batch_size, min=0, max=4096, description="batch size"),
        "persistent_workers": w.Checkbox(value=False, description="persistent_workers"),
    }
    return run_panel(
        functools.partial(panel_row, results, measure_row, cores, on_gpu),
        controls,
        validate=functools.partial(validate_panel, cores=cores, on_gpu=on_gpu),
        title="Time a pipeline with your settings",
        results=results,
    )


PANEL_COLUMNS = ["experiment", "num_workers", "batch_size", "status", *PANEL_METRICS, "error"]


def panel_table(results, last: int = 6):
    """The baseline (its latest row) and the panel's rows (the last ``last``), readable, newest last; the index is
    the row's number."""
    t = results.table(PANEL_METRICS)
    baseline = t.index[t["experiment"].eq("baseline")][-1:]
    t = t[t.index.isin(baseline) | t["experiment"].str.startswith("panel ")]
    return readable(t.filter(items=PANEL_COLUMNS)).sort_index().tail(last)
