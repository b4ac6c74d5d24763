"""The offline views of a profiler trace: overview, operators, kernels, memory, GPU time, timeline.

No server, no network: DataFrames and matplotlib figures, shown by ``perf_doctor.show``. ``open_trace(path)``
gives a ``Trace`` whose methods are the views, computed by the field's libraries in-process: torch-tb-profiler's
parser (the TensorBoard plugin's own Python side: Overview, operators, kernels, memory) and Holistic Trace Analysis
(the GPU's temporal and idle-time breakdowns, kernel launch statistics; GPU traces only). Both are imported when a
view first needs them: ``pip install 'perf-doctor[full]'`` brings them (``missing_libraries``); without them those
views raise a one-line ``TraceError`` saying so, and the doctor's own figures stand.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import tempfile
import traceback
import warnings
from functools import cached_property
from pathlib import Path
from typing import Any

from . import events as ev
from .kernels import kernel_rows, tensor_core_label, uses_tensor_cores
from .throughput import op_throughput
from .load import MAX_EVENTS, MAX_STEPS, TraceError, find_trace, gc_paused, load_trace, trim
from .stream import CUT_NOTE, read_trimmed
from .timeline import draw_timeline

FULL = "pip install 'perf-doctor[full]'"  # what brings the view libraries
# the libraries of the views (module: name), which the base install leaves out: HTA declares JupyterLab,
# torch-tb-profiler TensorBoard
VIEW_LIBRARIES = {"torch_tb_profiler": "torch-tb-profiler", "hta": "Holistic Trace Analysis"}
# the Overview's categories, in torch-tb-profiler's order (its ProfileRole); each is ms per step
CATEGORIES = (
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_exec",
    "other",
)
OVERVIEW_COLUMNS = [f"{c}_ms" for c in CATEGORIES] + ["step_ms"]
OPERATOR_COLUMNS = [
    "name",
    "calls",
    "host_self_ms",
    "host_total_ms",
    "device_self_ms",
    "device_total_ms",
    "tc_eligible",
    "tflops",
    "peak_pct",
]
KERNEL_COLUMNS = [
    "name",
    "calls",
    "total_ms",
    "mean_us",
    "max_us",
    "min_us",
    "blocks_per_sm",
    "occupancy_pct",
    "tensor_cores",
]
MEMORY_COLUMNS = ["device", "peak_allocated_mb", "peak_reserved_mb", "samples"]


def missing_libraries() -> list[str]:
    """The names of the view libraries (``VIEW_LIBRARIES``) this Python lacks."""
    return [
        name for module, name in VIEW_LIBRARIES.items() if importlib.util.find_spec(module) is None
    ]


def _need(module: str, label: str) -> None:
    """A one-line ``TraceError`` when the view library ``module`` is not installed."""
    if importlib.util.find_spec(module) is None:
        raise TraceError(f"{label}: {VIEW_LIBRARIES[module]} is not installed: {FULL}")


@contextlib.contextmanager
def quiet(*loggers: str):
    """A library call without its print()s, its loggers below ERROR (torch-tb-profiler's "ranges on the same thread
    should not intersect", HTA's parse timings) and pandas' deprecation warnings in them; with no logger named, all."""
    saved = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if not loggers:
        logging.disable(logging.WARNING)
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            if loggers:
                warnings.filterwarnings("ignore", module=r"(hta|torch_tb_profiler)(\.|$)")
            else:
                warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
        if not loggers:
            logging.disable(logging.NOTSET)


# the category torch-tb-profiler 0.4 knows for each kind of event (events.kind); it knows only the names of
# torch <= 1.9 for host runtime calls ("Runtime") and none of MTIA's or XPU's
_TB_CATEGORY = {
    "op": "cpu_op",
    "annotation": "user_annotation",
    "python": "python_function",
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "launch": "Runtime",
}
_TB_KNOWS = {
    "trace",
    "cpu_op",
    "operator",
    "runtime",
    "kernel",
    "memcpy",
    "gpu_memcpy",
    "memset",
    "gpu_memset",
    "python",
    "memory",
    "python_function",
    "user_annotation",
}


def _for_tb(doc: dict) -> dict:
    """The trace as torch-tb-profiler reads it best (its ``_preprocess_file`` work, on a shallow copy): runtime calls
    of new traces (``cuda_runtime``, ``hip_runtime`` ...) as ``Runtime``, so kernels link to their launches and
    operators (as on torch <= 1.9 traces); MTIA's ``mtia_ccp_events`` as kernels; device-timeline copies of labels left
    out (a copied ``ProfilerStep#N`` is one more step: twice the steps, each half as long), and impossible times; the
    DataLoader's ``__next__`` annotation as an operator (else its category is 0); no "Record Window End" instant."""
    events = []
    for e in doc.get("traceEvents", []):
        if not isinstance(e, dict):
            continue
        if e.get("ph") == "X":
            if not ev.valid_time(e):
                continue
            k = ev.kind(e)
            if k in ("device_annotation", "device_sync"):
                continue
            n = str(e.get("name", ""))
            if k == "annotation" and n.startswith(ev.DATALOADER_PREFIX) and n.endswith("__next__"):
                e = dict(e, cat="cpu_op")
            elif k in _TB_CATEGORY and ev.category(e.get("cat", "")) not in _TB_KNOWS:
                e = dict(e, cat=_TB_CATEGORY[k])
        elif e.get("ph") == "i" and e.get("name") == "Record Window End":
            continue
        events.append(e)
    return {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": events}


def _why(exc: BaseException) -> str:
    """A library's exception on one line (a bare ``assert``: the line of source it stopped on)."""
    text = (str(exc).strip().splitlines() or [""])[0][:160]
    if not text and exc.__traceback__ is not None:
        frames = traceback.extract_tb(exc.__traceback__)
        text = (frames[-1].line or "").strip()[:160] if frames else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Trace:
    """One loaded trace (``open_trace``: ``path``, ``doc``, ``notes``) and its views, which raise ``TraceError``."""

    def __init__(
        self,
        doc: dict,
        path: Path | None = None,
        notes: list[str] | None = None,
        trimmed: bool = False,
    ):
        self.doc, self.path, self.notes, self.trimmed = doc, path, list(notes or []), trimmed
        self.label = str(path) if path is not None else "the trace"
        if not ev.step_ranges(doc):
            self.notes.append(
                f"{self.label}: no ProfilerStep in the trace, so the whole trace is analysed as one "
                "step; profile with a schedule and call prof.step() each step to get per-step views"
            )

    @cached_property
    def has_gpu(self) -> bool:
        """True when the trace holds GPU activity (kernels, copies, memsets)."""
        return ev.has_gpu(self.doc)

    def _need_gpu(self, view: str) -> None:
        if not self.has_gpu:
            raise TraceError(
                f"{self.label}: a CPU-only trace has no GPU timeline for the {view}; profile on a "
                "GPU with ProfilerActivity.CUDA to get it"
            )

    @property
    def tb(self):
        """torch-tb-profiler's parsed profile: ``(RunProfileData, RunProfile)``, parsed once (a failure too)."""
        return self._once("_tb", self._parse_tb)

    def _once(self, attr: str, load):
        """``load()``'s result, computed once and kept in ``attr`` (a ``TraceError`` too, raised again each time)."""
        if attr not in self.__dict__:
            try:
                self.__dict__[attr] = load()
            except TraceError as exc:
                self.__dict__[attr] = exc
        value = self.__dict__[attr]
        if isinstance(value, TraceError):
            raise TraceError(str(value))
        return value

    def _parse_tb(self):
        _need("torch_tb_profiler", self.label)
        from torch_tb_profiler.profiler.data import RunProfileData
        from torch_tb_profiler.profiler.run_generator import RunGenerator

        try:
            with quiet("pytorch_profiler"), gc_paused(collect=False):
                data = RunProfileData.from_json("worker", "span", _for_tb(self.doc))
                run = RunGenerator("worker", "span", data).generate_run_profile()
        except Exception as exc:  # noqa: BLE001 - the library's failure becomes one line
            raise TraceError(
                f"{self.label}: torch-tb-profiler's parser failed on this trace ({_why(exc)})"
            ) from None
        return data, run

    def overview(self):
        """torch-tb-profiler's Overview: a row per step and ``average``; ``OVERVIEW_COLUMNS`` add up to ``step_ms``."""
        import pandas as pd

        data, _ = self.tb
        rows = [[c / 1000.0 for c in costs.costs] for costs in data.steps_costs]
        rows.append([c / 1000.0 for c in data.avg_costs.costs])
        names = [
            f"ProfilerStep#{n}" if str(n).isdigit() and ev.step_ranges(self.doc) else str(n)
            for n in data.steps_names
        ]
        return pd.DataFrame(
            rows, index=pd.Index(names + ["average"], name="step"), columns=OVERVIEW_COLUMNS
        )

    def step_times(self):
        """Each ProfilerStep's host duration (``step``, ``step_ms``), from the trace itself."""
        import pandas as pd

        ranges = ev.step_ranges(self.doc)
        return pd.DataFrame(
            [{"step": n, "step_ms": (b - a) / 1000.0} for n, a, b in ranges],
            columns=["step", "step_ms"],
        )

    def operators(self):
        """torch-tb-profiler's Operator view (``OPERATOR_COLUMNS``), by device self time, else host self time.
        ``tc_eligible``: the plugin's mark of an operator that *could* use tensor cores (``kernels`` says if they did);
        ``tflops``, ``peak_pct``: ``op_throughput`` where shapes were recorded."""
        import pandas as pd

        _, run = self.tb
        nan = float("nan")
        tput = (
            {
                r["name"]: {
                    "tflops": r["tflops"],
                    "peak_pct": nan if r["peak_pct"] is None else r["peak_pct"],
                }
                for r in op_throughput(self.doc)
            }
            if self.has_gpu
            else {}
        )
        rows = [
            {
                "name": r["name"],
                "calls": r["calls"],
                "host_self_ms": r["host_self_duration"] / 1000.0,
                "host_total_ms": r["host_total_duration"] / 1000.0,
                "device_self_ms": r.get("device_self_duration", 0) / 1000.0,
                "device_total_ms": r.get("device_total_duration", 0) / 1000.0,
                "tc_eligible": r.get("tc_eligible") == "Yes",
                **tput.get(r["name"], {"tflops": nan, "peak_pct": nan}),
            }
            for r in run.operation_table_by_name["data"]
        ]
        df = pd.DataFrame(rows, columns=OPERATOR_COLUMNS)
        key = "device_self_ms" if df["device_self_ms"].any() else "host_self_ms"
        return df.sort_values(key, ascending=False, kind="stable").reset_index(drop=True)

    def operators_note(self) -> str | None:
        """One line when torch-tb-profiler linked no kernel to its operator on a GPU trace (device columns 0)."""
        if self.has_gpu and not self.operators()["device_self_ms"].any():
            return (
                f"{self.label}: torch-tb-profiler linked no kernel to its operator on this trace, so the "
                "device columns are 0 and operators are ranked by host time; the Kernels view has the GPU time"
            )
        return None

    def kernels(self):
        """torch-tb-profiler's Kernel view (``KERNEL_COLUMNS``), by total time. ``tensor_cores``: ``uses_tensor_cores``,
        not the plugin's ``tc_used`` (it marks FP32 FFMA GEMMs as tensor-core, TF32 convolutions not). Needs a GPU."""
        import pandas as pd

        self._need_gpu("kernel view")
        data, _ = self.tb
        ks = data.kernel_stat
        if ks is None or len(ks) == 0:
            raise TraceError(f"{self.label}: torch-tb-profiler found no kernels in this trace")
        own = {
            r["name"]: r
            for r in kernel_rows([e for e in ev.complete(self.doc) if ev.kind(e) == "kernel"])
        }
        df = pd.DataFrame(
            {
                "name": ks.index,
                "calls": ks["count"].to_numpy(),
                "total_ms": ks["sum"].to_numpy() / 1000.0,
                "mean_us": ks["mean"].to_numpy(),
                "max_us": ks["max"].to_numpy(),
                "min_us": ks["min"].to_numpy(),
                # from the trace's own records: None (NaN) where it has none, as torch-tb-profiler's 0 is not
                "blocks_per_sm": [own.get(n, {}).get("blocks_per_sm") for n in ks.index],
                "occupancy_pct": [own.get(n, {}).get("occupancy_pct") for n in ks.index],
                "tensor_cores": [tensor_core_label(uses_tensor_cores(n)) for n in ks.index],
            }
        )
        return df.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)[
            KERNEL_COLUMNS
        ]

    def tensor_core_split(self) -> dict[str, float] | None:
        """Kernel time shares by ``tensor_cores`` (``yes``, ``no``, ``unknown``); None on a CPU trace or none."""
        if not self.has_gpu:
            return None
        k = self.kernels()
        total = float(k["total_ms"].sum())
        if total <= 0:
            return None
        by = k.groupby("tensor_cores")["total_ms"].sum()
        return {key: float(by.get(key, 0.0)) / total for key in ("yes", "no", "unknown")}

    def memory(self):
        """Per device ``MEMORY_COLUMNS`` from torch-tb-profiler's memory records (``profile_memory=True``)."""
        import pandas as pd

        data, _ = self.tb
        snap = data.memory_snapshot
        if snap is None or not snap.memory_records:
            raise TraceError(
                f"{self.label}: no memory records in this trace; profile with profile_memory=True "
                "to get the memory view"
            )
        rows = [
            (r.device_name, r.total_allocated / 2**20, r.total_reserved / 2**20)
            for r in snap.memory_records
            if r.addr is not None
            and r.total_allocated == r.total_allocated
            and r.total_reserved == r.total_reserved
        ]
        out = (
            pd.DataFrame(rows, columns=["device", "allocated_mb", "reserved_mb"])
            .groupby("device", sort=True)
            .agg(
                peak_allocated_mb=("allocated_mb", "max"),
                peak_reserved_mb=("reserved_mb", "max"),
                samples=("allocated_mb", "size"),
            )
        )
        return out.reset_index()[MEMORY_COLUMNS]

    @property
    def hta(self):
        """HTA's ``TraceAnalysis`` (GPU traces only), loaded once, of the file or a temporary copy of the dict."""
        self._need_gpu("GPU time views")
        return self._once("_hta", self._load_hta)

    def _load_hta(self):
        _need("hta", self.label)
        from hta.trace_analysis import TraceAnalysis

        tmp, path = None, self.path
        if path is None or self.trimmed:
            fd, tmp = tempfile.mkstemp(suffix=".json")
            with os.fdopen(fd, "w") as f, gc_paused(collect=False):
                f.write(
                    json.dumps(self.doc)
                )  # json.dumps runs the C encoder; json.dump the Python one (5x slower)
            path = Path(tmp)
        try:
            with quiet("hta"), gc_paused(collect=False):
                return TraceAnalysis(trace_files={0: str(Path(path).resolve())}, trace_dir="/")
        except Exception as exc:  # noqa: BLE001 - the library's failure becomes one line
            raise TraceError(
                f"{self.label}: Holistic Trace Analysis could not load this trace ({_why(exc)})"
            ) from None
        finally:
            if tmp:
                os.unlink(tmp)

    def _hta_call(self, what: str, fn):
        try:
            with quiet("hta"):
                return fn(self.hta)
        except TraceError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise TraceError(
                f"{self.label}: Holistic Trace Analysis' {what} failed ({_why(exc)})"
            ) from None

    def gpu_breakdown(self) -> dict[str, float] | None:
        """HTA's ``{"idle_pct", "compute_pct", "non_compute_pct"}`` (it drops the last step); None on a CPU trace."""
        if not self.has_gpu:
            return None
        df = self._hta_call(
            "temporal breakdown", lambda a: a.get_temporal_breakdown(visualize=False)
        )
        r = df.iloc[0]
        return {
            "idle_pct": float(r["idle_time_pctg"]),
            "compute_pct": float(r["compute_time_pctg"]),
            "non_compute_pct": float(r["non_compute_time_pctg"]),
        }

    def idle_breakdown(self):
        """HTA's idle time per stream and category (host_wait, kernel_wait, other): ``idle_ms``, ``idle_share``."""
        df, _ = self._hta_call(
            "idle time breakdown", lambda a: a.get_idle_time_breakdown(visualize=False)
        )
        return (
            df.rename(columns={"idle_time": "idle_ms", "idle_time_ratio": "idle_share"})
            .assign(idle_ms=lambda d: d["idle_ms"] / 1000.0)
            .drop(columns=["rank"], errors="ignore")
        )

    def launch_stats(self):
        """HTA's launch statistics, a row per launch: ``cpu_duration_us``, ``gpu_duration_us``, ``launch_delay_us``."""
        stats = self._hta_call(
            "kernel launch statistics", lambda a: a.get_cuda_kernel_launch_stats(visualize=False)
        )
        if not stats:
            raise TraceError(f"{self.label}: HTA found no kernel launches in this trace")
        df = next(iter(stats.values()))
        return df.rename(
            columns={
                "cpu_duration": "cpu_duration_us",
                "gpu_duration": "gpu_duration_us",
                "launch_delay": "launch_delay_us",
            }
        )

    def launch_summary(self) -> dict[str, float]:
        """``launches``, ``launch_stats``' medians, ``short_kernel_share`` (kernels shorter than their launch call)."""
        df = self.launch_stats()
        return {
            "launches": int(len(df)),
            "cpu_duration_us": float(df["cpu_duration_us"].median()),
            "gpu_duration_us": float(df["gpu_duration_us"].median()),
            "launch_delay_us": float(df["launch_delay_us"].median()),
            "short_kernel_share": float((df["gpu_duration_us"] < df["cpu_duration_us"]).mean()),
        }

    def timeline(self, steps: int = 3, title: str | None = None):
        """A Perfetto-like picture (``timeline``) of the first ``steps`` ProfilerSteps, titled ``title``."""
        return draw_timeline(self.doc, steps=steps, title=title)


def open_trace(src: Any, max_steps: int | None = MAX_STEPS) -> Trace:
    """A ``Trace`` of a trace file or folder, a dict or a ``Trace``; cut to ``max_steps`` (``trim``; None: all)."""
    if isinstance(src, Trace):
        return src
    if isinstance(src, dict):
        if not isinstance(src.get("traceEvents"), list):
            raise TraceError(
                "the dict given is not a Chrome trace (no traceEvents list); pass what load_trace returns"
            )
        if not any(isinstance(e, dict) and e.get("ph") == "X" for e in src["traceEvents"]):
            raise TraceError("the trace dict holds no profiled events; profile some steps first")
        path, notes, doc = None, [], src
    else:
        path, notes = find_trace(src)
        if max_steps is None:
            doc = load_trace(path)
        else:  # the first steps only, streamed: memory follows the steps kept, not the file (load.read_trimmed)
            doc, note, more = read_trimmed(path, max_steps=max_steps, max_events=MAX_EVENTS)
            notes += more
    if path is None or max_steps is None:
        doc, note = trim(
            doc, max_steps=max_steps, max_events=None if max_steps is None else MAX_EVENTS
        )
    if note:
        notes.append(f"{path or 'the trace'}: {note}")
    cut = any(
        CUT_NOTE in n for n in notes
    )  # strings cut: the libraries must read the document, not the file
    return Trace(doc, path, notes, trimmed=bool(note) or cut)
