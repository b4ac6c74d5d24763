"""Notebook 05's lesson code. The planted bottlenecks: a small MLP training step with one bottleneck planted at a
time (``planted_step``), so the doctor's verdict can be checked against a known cause and against the step with
the plant removed; ``run_case`` plants, profiles and diagnoses one as a results row. Around them: the tables and the
chart the notebook shows (thresholds, verdicts, saved vs claimed), the panel's validator, the reference GPU traces
under ``data/reference/<gpu>/05_diagnose/`` and the bad inputs of its appendix, written from this run's own traces.
``diagnose_step`` and ``helpers.traces.diagnose`` themselves are taught in the notebook."""
from __future__ import annotations

import gzip
import math
import numbers
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from ..measure.device import synchronize
from ..measure.diagnose import diagnose_step, training_step
from ..measure.profiling import activities, export_chrome_trace, trace_files
from ..measure.timing import torch_threads
from ..measure.training import labelled_step
from ..measure.validate import InvalidValue, validate_choice, validate_positive
from ..traces import diagnosis as dg

PLANTED = ("none", "input", "launch/overhead", "compute", "host sync")
COUNTED = ("none", "launch/overhead", "compute")          # sizes that count something: whole numbers
SIZE_LIMITS = {"launch/overhead": (20_000, "more than 20,000 tiny ops would take minutes; choose fewer."),
               "compute": (16_384, "a matrix side above 16,384 would need gigabytes; choose a smaller one.")}


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
    validate_positive(size, "size")
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


# --- one case, as a results row ---------------------------------------------------------------------------------
def validate_size(kind: str, size: Any) -> int | float:
    """A plant's size, refused with a one-line message unless it is a positive, finite number (a whole one where it
    counts ops or a matrix side) within ``SIZE_LIMITS``; returned as ``planted_step`` takes it."""
    validate_positive(size, "the size")
    if kind in COUNTED:
        if size != int(size):
            raise InvalidValue(f"the size of a {kind} plant counts ops or a matrix side: a whole number, not {size!r}.")
        limit, why = SIZE_LIMITS.get(kind, (math.inf, ""))
        if size > limit:
            raise InvalidValue(why)
        return int(size)
    return float(size)


def validate_panel(values: Mapping[str, Any], on_gpu: bool) -> dict[str, Any]:
    """The panel's values, checked before anything runs: a known plant, a size ``validate_size`` accepts, and no
    host-sync plant without a GPU (there is no device to wait for). Raises ``InvalidValue`` with the message."""
    kind = validate_choice(values["kind"], PLANTED, "planted bottleneck")
    size = validate_size(kind, values["size"])
    if kind == "host sync" and not on_gpu:
        raise InvalidValue("a host sync needs a GPU to wait for; on a CPU choose another bottleneck.")
    return {"kind": kind, "size": size}


def case_name(kind: Any, size: Any, item: bool = True) -> str:
    """A case's row name: ``planted compute (size 768)``; ``unknown bottleneck 'disk'`` for an unknown plant. Never
    raises, whatever the values (a row name must not be where bad input fails)."""
    if not isinstance(kind, str) or kind not in PLANTED:
        return f"unknown bottleneck {kind!r}"
    shown = f"{size:g}" if isinstance(size, numbers.Real) and not isinstance(size, bool) else repr(size)
    return f"planted {kind} (size {shown})" + ("" if item else " without .item()")


def causes_metrics(d) -> dict[str, Any]:
    """A diagnosis as a results row's metrics: the mean step, the top cause, each judged cause's ms and their sum
    (and the trace folder, when ``diagnose_step`` wrote one)."""
    judged = [c for c in d.causes if c["ms"] is not None]
    m = {"step_ms_mean": d.step_ms, "top_cause": d.top, **{f"{c['cause']}_ms": c["ms"] for c in judged},
         "causes_ms_sum": round(sum(c["ms"] for c in judged), 3)}
    return m | ({"trace_dir": str(d.trace_dir)} if d.trace_dir is not None else {})


def record_diagnosis(results, name: str, config: Mapping[str, Any], diagnosed: Callable[[], Any]):
    """Run ``diagnosed()`` (a diagnosis, from ``diagnose_step`` say) as the results row ``name``: its metrics are
    ``causes_metrics``; a failure is a failed row with a one-line message. Returns the diagnosis, None if it failed."""
    out = {}

    def experiment():
        out["d"] = diagnosed()
        return causes_metrics(out["d"])

    row = results.record(name, config, experiment)
    return out.get("d") if row["status"] == "ok" else None


def run_case(results, kind: Any = "input", size: Any = None, item: bool = True, *, sizes: Mapping[str, Any], device,
             batch_size: int, features: int, hidden: int, overlap: int, wait: int, warmup: int, active: int):
    """Plant one bottleneck (``sizes[kind]`` unless ``size`` is given), profile the step with ``diagnose_step`` and
    diagnose it, as a results row (``record_diagnosis``). The host-sync plant gets an ``overlap``-sided product as GPU
    work to overlap with; ``item=False`` is its fix. Bad input (an unknown plant, a size ``validate_size`` refuses)
    is a failed row with a one-line message, never an exception. Returns the diagnosis, or None."""
    import torch

    if size is None and isinstance(kind, str):
        size = sizes.get(kind)
    plant = {"overlap": overlap, "item": item} if kind == "host sync" else {}
    config = {"planted": kind, "size": size, "device": torch.device(device).type, **plant}

    def diagnosed():
        validate_choice(kind, PLANTED, "planted bottleneck")
        step = planted_step(kind, validate_size(kind, size), device=device, batch_size=batch_size, features=features,
                            hidden=hidden, **plant)
        return diagnose_step(step, wait=wait, warmup=warmup, active=active, device=device, name=f"05_diagnose/{kind}")

    return record_diagnosis(results, case_name(kind, size, item), config, diagnosed)


# --- what the notebook shows --------------------------------------------------------------------------------------
THRESHOLDS = (("MIN_FINDING_SHARE", "a cause below this share of the step is listed, not a finding"),
              ("TINY_OP_US", "CPU: an operator whose median call is shorter is overhead"),
              ("SHORT_KERNEL_US", "GPU: a kernel this short is comparable to its launch"),
              ("NEAR_CAPACITY", "GPU: peak reserved memory above this share of the device"))


def thresholds_table():
    """The doctor's thresholds (constants of ``helpers.traces.diagnosis``), their values and what each decides."""
    import pandas as pd

    return pd.DataFrame([{"constant": n, "value": getattr(dg, n), "meaning": m} for n, m in THRESHOLDS]
                        ).set_index("constant")


def verdicts_table(planted: Mapping[str, Any]):
    """One row per planted case that ran: its top cause, mean step, each cause's ms (None: cannot judge) and the
    causes' sum. Indexed by the planted kind."""
    import pandas as pd

    rows = [{"planted": kind, "top cause": d.top, "step (ms)": d.step_ms, **{c["cause"]: c["ms"] for c in d.causes},
             "causes sum (ms)": sum(c["ms"] or 0 for c in d.causes)} for kind, d in planted.items() if d is not None]
    return pd.DataFrame(rows, columns=None if rows else ["planted", "top cause", "step (ms)", "causes sum (ms)"]
                        ).set_index("planted")


CAUSE_COLORS = {"input": "#dd8452", "host sync": "#c44e52", "launch/overhead": "#8172b3", "compute": "#4c72b0",
                "memory": "#937860", "communication": "#55a868"}


def verdicts_chart(verdicts, xlabel: str):
    """Each planted step's time as one bar split into causes (``verdicts_table``); a cause that cannot be judged
    draws nothing. Returns the figure."""
    import matplotlib.pyplot as plt
    import pandas as pd

    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.6 * max(len(verdicts), 1)))
    left = pd.Series(0.0, index=verdicts.index)
    for cause in dg.CAUSES:
        if cause in verdicts:
            vals = pd.to_numeric(verdicts[cause], errors="coerce").fillna(0.0)   # None (cannot judge) -> 0
            ax.barh(verdicts.index, vals, left=left, color=CAUSE_COLORS[cause], label=cause)
            left += vals
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title("Each planted step split into causes by the doctor")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the bars, not over
    return fig


SAVED_COLUMNS = ["doctor: could save (ms)", "measured: planted − fixed (ms)", "ratio measured / claimed"]


def saved_vs_claimed(planted: Mapping[str, Any], fixed: Mapping[str, Any]):
    """Per planted case: the ms the doctor said fixing it could save, the ms removing it did save (planted step −
    fixed step) and their ratio (NaN when the claim is 0). Cases whose planted or fixed run failed are left out."""
    import pandas as pd

    rows = []
    for kind, d in planted.items():
        f = fixed.get(kind)
        if d is None or f is None:
            continue
        claim, measured = d.ms(kind), d.step_ms - f.step_ms
        rows.append({"planted": kind, SAVED_COLUMNS[0]: claim, SAVED_COLUMNS[1]: measured,
                     SAVED_COLUMNS[2]: measured / claim if claim else float("nan")})
    return pd.DataFrame(rows, columns=["planted", *SAVED_COLUMNS]).set_index("planted")


# --- reference GPU traces -------------------------------------------------------------------------------------
def reference_traces(root: Path | str) -> list[Path]:
    """The project's reference traces of this notebook: ``<root>/<gpu>/05_diagnose/*.json.gz``, sorted (none when the
    folder is missing)."""
    return sorted(Path(root).glob("*/05_diagnose/*.json.gz"))


def sync_found(d) -> bool:
    """Does this diagnosis find synchronisations with GPU idle time after them (host sync > 0 ms, from at least one
    synchronisation call)? False on a CPU-only trace, which cannot judge syncs."""
    c = next((c for c in d.causes if c["cause"] == "host sync"), None)
    return bool(c and c["ms"] and c["ms"] > 0 and re.match(r"[1-9]\d* synchronisation", c["evidence"]))


def gpu_idle_vs_hta(d, trace) -> dict[str, float]:
    """GPU idle % inside the profiled steps by the doctor (100 − the compute and communication shares: the GPU runs
    one or the other) beside Holistic Trace Analysis' temporal breakdown of the same trace (``Trace.gpu_breakdown``,
    which spans the GPU's whole profiled time)."""
    from ..traces.views import open_trace, quiet

    with quiet():
        hta = open_trace(Path(trace)).gpu_breakdown()
    busy = (d.ms("compute") or 0.0) + (d.ms("communication") or 0.0)
    return {"doctor": round(100 * (1 - busy / d.step_ms), 2), "hta": hta["idle_pct"]}


# --- bad input for the appendix -----------------------------------------------------------------------------------
def write_bad_inputs(folder: Path | str, trace_dir: Path | str | None = None) -> dict[str, Path]:
    """Write the appendix's bad inputs into ``folder`` and return them by what they are: a JSON file that is not a
    trace, a truncated ``.gz`` (the first half of the gzipped trace ``diagnose_step`` wrote into ``trace_dir``; of the
    notes when there is none) and an empty folder."""
    folder = Path(folder)
    (folder / "empty").mkdir(parents=True, exist_ok=True)
    notes = folder / "notes.json"
    notes.write_text("these are my notes, not a trace")
    files = trace_files(trace_dir) if trace_dir is not None else []
    whole = gzip.compress((files[-1] if files else notes).read_bytes())
    cut = folder / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    return {"not a trace": notes, "truncated gz": cut, "empty folder": folder / "empty"}


def trace_without_steps(path: Path | str, step_fn: Callable[[], Any], device=None, calls: int = 3) -> Path:
    """A Chrome trace with no ``ProfilerStep`` marks: ``calls`` calls of ``step_fn`` profiled with no schedule and no
    ``prof.step()``, as a quick ``with profile(): ...`` records them. Returns the path."""
    import torch

    with torch.profiler.profile(activities=activities(device)) as prof:
        for _ in range(calls):
            step_fn()
        synchronize(device)
    return export_chrome_trace(prof, path)
