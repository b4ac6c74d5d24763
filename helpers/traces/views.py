"""The offline views of a profiler trace: overview, operators, kernels, memory, GPU time, timeline.

No server, no network: DataFrames and matplotlib figures, shown by ``helpers.traces.show`` (its entry point; taught
in ``05_diagnose`` and shown beside ``%tensorboard`` in notebooks 01-04). The numbers come from the field's
libraries, run in-process:

- torch-tb-profiler's parser (``RunProfileData`` + ``RunGenerator``): the step-time breakdown (Overview),
  the operator and kernel tables, the memory records. It is the TensorBoard plugin's own Python side.
- Holistic Trace Analysis (``hta.trace_analysis.TraceAnalysis``): the GPU's temporal breakdown (idle /
  compute / non-compute), the idle-time breakdown and the kernel launch statistics; GPU traces only.

Use it through ``helpers.traces``: ``traces.open_trace(path)`` gives a ``Trace`` whose methods are the views.
"""
from __future__ import annotations

import contextlib
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
from .kernels import tensor_core_label, uses_tensor_cores
from .throughput import op_throughput
from .load import MAX_EVENTS, MAX_STEPS, TraceError, find_trace, load_trace, no_gc, trim
from .stream import read_trimmed
from .timeline import draw_timeline

# the Overview's categories, in torch-tb-profiler's order (its ProfileRole); each is ms per step
CATEGORIES = ("kernel", "memcpy", "memset", "communication", "runtime", "dataloader", "cpu_exec", "other")
OVERVIEW_COLUMNS = [f"{c}_ms" for c in CATEGORIES] + ["step_ms"]
OPERATOR_COLUMNS = ["name", "calls", "host_self_ms", "host_total_ms", "device_self_ms", "device_total_ms",
                    "tc_eligible", "tflops", "peak_pct"]
KERNEL_COLUMNS = ["name", "calls", "total_ms", "mean_us", "max_us", "min_us", "blocks_per_sm",
                  "occupancy_pct", "tensor_cores"]
MEMORY_COLUMNS = ["device", "peak_allocated_mb", "peak_reserved_mb", "samples"]


@contextlib.contextmanager
def quiet(*loggers: str):
    """Run a library call without its chatter: its print()s and its loggers below ERROR (torch-tb-profiler
    logs "ranges on the same thread should not intersect" on newer traces; HTA prints parse timings) and without
    the deprecation warnings that pandas raises inside those two libraries (warnings from elsewhere still show).
    With no logger named (the doctor's command line), every logger up to WARNING and every warning is silenced."""
    saved = {}
    for name in loggers:
        lg = logging.getLogger(name)
        saved[name] = lg.level
        lg.setLevel(logging.CRITICAL)
    if not loggers:
        logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
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
_TB_CATEGORY = {"op": "cpu_op", "annotation": "user_annotation", "python": "python_function", "kernel": "kernel",
                "memcpy": "gpu_memcpy", "memset": "gpu_memset", "launch": "Runtime"}
_TB_KNOWS = {"trace", "cpu_op", "operator", "runtime", "kernel", "memcpy", "gpu_memcpy", "memset", "gpu_memset",
             "python", "memory", "python_function", "user_annotation"}


def _for_tb(doc: dict) -> dict:
    """The trace as torch-tb-profiler reads it best (its ``_preprocess_file`` work, done on our copy):
    - each event's category in the spelling the parser knows (``events.kind``): a runtime call of a new trace
      (``cuda_runtime``, ``hip_runtime``, ``xpu_runtime`` ...) becomes ``Runtime``, so the parser links kernels to
      their launches and operators (its Runtime category, its operator table's device columns, its steps extended
      to the end of their GPU work as on torch <= 1.9 traces); MTIA's ``mtia_ccp_events`` become kernels;
    - the device-timeline copies of labels (``gpu_user_annotation``) are left out: the parser takes a copied
      ``ProfilerStep#N`` for one more step (twice the steps, each half as long), and the others for operators;
    - events with an impossible time (``events.valid_time``) are left out;
    - PyTorch records the DataLoader's ``enumerate(DataLoader)#...__next__`` as a user annotation, which the
      parser (older than that change) skips, so its DataLoader category would always be 0: those ranges are
      handed to it as operators;
    - the "Record Window End" instant, far after the trace on some versions, is dropped (as the plugin does).
    Shallow: the events themselves are shared, not copied, unless their category changes."""
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
    """A library's exception in a few words, on one line (a bare ``assert`` says which check failed: the line of
    source it stopped on)."""
    text = (str(exc).strip().splitlines() or [""])[0][:160]
    if not text and exc.__traceback__ is not None:
        frames = traceback.extract_tb(exc.__traceback__)
        text = (frames[-1].line or "").strip()[:160] if frames else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Trace:
    """One loaded trace and its views. Make it with ``helpers.traces.open_trace(path_or_dir)``.

    ``path`` is the file read (None for a dict given directly), ``doc`` the Chrome-trace dict, ``notes`` what
    the reader should know (no ProfilerStep, several trace files in a folder ...). Each view raises
    ``TraceError`` (one line) when it cannot be computed on this trace.
    """

    def __init__(self, doc: dict, path: Path | None = None, notes: list[str] | None = None, trimmed: bool = False):
        self.doc, self.path, self.notes, self.trimmed = doc, path, list(notes or []), trimmed
        self.label = str(path) if path is not None else "the trace"
        if not ev.step_ranges(doc):
            self.notes.append(f"{self.label}: no ProfilerStep in the trace, so the whole trace is analysed as one "
                              "step; profile with a schedule and call prof.step() each step to get per-step views")

    # ---- facts -------------------------------------------------------------------------------------------
    @cached_property
    def has_gpu(self) -> bool:
        """True when the trace holds GPU activity (kernels, copies, memsets)."""
        return ev.has_gpu(self.doc)

    def _need_gpu(self, view: str) -> None:
        if not self.has_gpu:
            raise TraceError(f"{self.label}: a CPU-only trace has no GPU timeline for the {view}; profile on a "
                             "GPU with ProfilerActivity.CUDA to get it")

    # ---- torch-tb-profiler ---------------------------------------------------------------------------------
    @property
    def tb(self):
        """torch-tb-profiler's parsed profile: ``(RunProfileData, RunProfile)``, parsed once (a failure too)."""
        return self._once("_tb", self._parse_tb)

    def _once(self, attr: str, load):
        """``load()``'s result, computed once and kept in ``attr``; a ``TraceError`` is kept too and raised again,
        so a library that fails on this trace is tried once and reported the same way each time."""
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
        try:
            from torch_tb_profiler.profiler.data import RunProfileData
            from torch_tb_profiler.profiler.run_generator import RunGenerator
        except ImportError as exc:  # pragma: no cover - it is a declared dependency
            raise TraceError(f"torch-tb-profiler is not installed ({exc}); pip install torch-tb-profiler") from None
        try:
            with quiet("pytorch_profiler"), no_gc():
                data = RunProfileData.from_json("worker", "span", _for_tb(self.doc))
                run = RunGenerator("worker", "span", data).generate_run_profile()
        except Exception as exc:  # noqa: BLE001 - the library's failure becomes one line
            raise TraceError(f"{self.label}: torch-tb-profiler's parser failed on this trace "
                             f"({_why(exc)})") from None
        return data, run

    def overview(self):
        """The step-time breakdown (torch-tb-profiler's Overview): one row per step and a last row
        ``average``, columns ``kernel_ms, memcpy_ms, memset_ms, communication_ms, runtime_ms, dataloader_ms,
        cpu_exec_ms, other_ms`` that add up to ``step_ms``. Each step's time is given to one category by
        priority (GPU work first, then runtime calls, DataLoader, CPU ops; "other" is what is left)."""
        import pandas as pd

        data, _ = self.tb
        rows = [[c / 1000.0 for c in costs.costs] for costs in data.steps_costs]
        rows.append([c / 1000.0 for c in data.avg_costs.costs])
        names = [f"ProfilerStep#{n}" if str(n).isdigit() and ev.step_ranges(self.doc) else str(n)
                 for n in data.steps_names]
        return pd.DataFrame(rows, index=pd.Index(names + ["average"], name="step"), columns=OVERVIEW_COLUMNS)

    def step_times(self):
        """Each ProfilerStep's host duration from the trace itself (``step``, ``step_ms``): what the Overview
        shows when the parser fails."""
        import pandas as pd

        ranges = ev.step_ranges(self.doc)
        return pd.DataFrame([{"step": n, "step_ms": (b - a) / 1000.0} for n, a, b in ranges], columns=["step", "step_ms"])

    def operators(self):
        """Operators (torch-tb-profiler's Operator view): ``name, calls, host_self_ms, host_total_ms,
        device_self_ms, device_total_ms, tc_eligible``, by device self time on a GPU trace, else host self
        time (the device columns are 0 on a CPU-only trace). ``tc_eligible`` is torch-tb-profiler's mark of an
        operator that *could* run on tensor cores (a matmul or convolution in a precision they take), not whether
        its kernels did: the Kernels view's ``tensor_cores`` says that (``show`` leaves this column out). ``tflops`` and
        ``peak_pct``: a matmul/convolution's achieved TFLOP/s and its share of the device's dense peak for the data type
        its kernels ran in (``kernels.op_throughput``: where the trace recorded shapes; NaN elsewhere)."""
        import pandas as pd

        _, run = self.tb
        rows = [{"name": r["name"], "calls": r["calls"],
                 "host_self_ms": r["host_self_duration"] / 1000.0, "host_total_ms": r["host_total_duration"] / 1000.0,
                 "device_self_ms": r.get("device_self_duration", 0) / 1000.0,
                 "device_total_ms": r.get("device_total_duration", 0) / 1000.0,
                 "tc_eligible": r.get("tc_eligible") == "Yes"} for r in run.operation_table_by_name["data"]]
        tput = {r["name"]: r for r in op_throughput(self.doc)} if self.has_gpu else {}
        for r in rows:
            t = tput.get(r["name"], {})
            r["tflops"] = t.get("tflops", float("nan"))
            r["peak_pct"] = float("nan") if t.get("peak_pct") is None else t["peak_pct"]
        df = pd.DataFrame(rows, columns=OPERATOR_COLUMNS)
        key = "device_self_ms" if df["device_self_ms"].any() else "host_self_ms"
        return df.sort_values(key, ascending=False, kind="stable").reset_index(drop=True)

    def operators_note(self) -> str | None:
        """One line when the operator table's device columns cannot be trusted on this trace: a GPU trace where
        torch-tb-profiler linked no kernel to the operator that launched it."""
        if self.has_gpu and not self.operators()["device_self_ms"].any():
            return (f"{self.label}: torch-tb-profiler linked no kernel to its operator on this trace, so the "
                    "device columns are 0 and operators are ranked by host time; the Kernels view has the GPU time")
        return None

    def kernels(self):
        """GPU kernels (torch-tb-profiler's Kernel view): ``name, calls, total_ms, mean_us, max_us, min_us,
        blocks_per_sm, occupancy_pct, tensor_cores``, by total time; the occupancy columns are empty where the
        trace did not record them. ``name`` is the full name (a table shows ``kernels.short_name`` of it).
        ``tensor_cores`` is classified from kernel names (``kernels.uses_tensor_cores``: "yes", "no", or "unknown"
        for a GEMM whose name does not say), not torch-tb-profiler's ``tc_used``, whose substring list marks FP32
        FFMA GEMMs as tensor-core and TF32 convolutions as not. Raises ``TraceError`` on a CPU-only trace."""
        import pandas as pd

        self._need_gpu("kernel view")
        data, _ = self.tb
        ks = data.kernel_stat
        if ks is None or len(ks) == 0:
            raise TraceError(f"{self.label}: torch-tb-profiler found no kernels in this trace")
        df = pd.DataFrame({
            "name": ks.index, "calls": ks["count"].to_numpy(), "total_ms": ks["sum"].to_numpy() / 1000.0,
            "mean_us": ks["mean"].to_numpy(), "max_us": ks["max"].to_numpy(), "min_us": ks["min"].to_numpy(),
            "blocks_per_sm": ks["blocks_per_sm"].to_numpy() if "blocks_per_sm" in ks else float("nan"),
            "occupancy_pct": ks["occupancy"].to_numpy() if "occupancy" in ks else float("nan"),
            "tensor_cores": [tensor_core_label(uses_tensor_cores(n)) for n in ks.index]})
        return df.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)[KERNEL_COLUMNS]

    def tensor_core_share(self) -> float | None:
        """The share of kernel time in kernels that use tensor cores, classified from kernel names
        (``kernels.uses_tensor_cores``; see ``tensor_core_split``), None on a CPU trace."""
        split = self.tensor_core_split()
        return None if split is None else split["yes"]

    def tensor_core_split(self) -> dict[str, float] | None:
        """The shares of kernel time in kernels classified from their names as using tensor cores (``yes``),
        not (``no``: CUDA-core GEMMs, element-wise, reductions ...), and GEMMs whose name does not say
        (``unknown``); None on a CPU trace or one without kernel time."""
        if not self.has_gpu:
            return None
        k = self.kernels()
        total = float(k["total_ms"].sum())
        if total <= 0:
            return None
        by = k.groupby("tensor_cores")["total_ms"].sum()
        return {key: float(by.get(key, 0.0)) / total for key in ("yes", "no", "unknown")}

    def memory(self):
        """Memory (where the trace recorded it: ``profile_memory=True``): per device ``device,
        peak_allocated_mb, peak_reserved_mb, samples``, from torch-tb-profiler's memory records.
        Raises ``TraceError`` when the trace has no memory records."""
        curves = self.memory_curve()
        out = curves.groupby("device", sort=True).agg(peak_allocated_mb=("allocated_mb", "max"),
                                                      peak_reserved_mb=("reserved_mb", "max"),
                                                      samples=("t_ms", "size"))
        return out.reset_index()[MEMORY_COLUMNS]

    def memory_curve(self):
        """Allocated and reserved memory over time: ``device, t_ms, allocated_mb, reserved_mb`` (t from the
        trace's first event)."""
        import pandas as pd

        data, _ = self.tb
        snap = data.memory_snapshot
        if snap is None or not snap.memory_records:
            raise TraceError(f"{self.label}: no memory records in this trace; profile with profile_memory=True "
                             "to get the memory view")
        t0 = data.profiler_start_ts
        rows = [(r.device_name, (r.ts - t0) / 1000.0, r.total_allocated / 2**20, r.total_reserved / 2**20)
                for r in snap.memory_records if r.addr is not None
                and r.total_allocated == r.total_allocated and r.total_reserved == r.total_reserved]
        return pd.DataFrame(rows, columns=["device", "t_ms", "allocated_mb", "reserved_mb"])

    # ---- Holistic Trace Analysis ---------------------------------------------------------------------------
    @property
    def hta(self):
        """HTA's ``TraceAnalysis`` of this trace (GPU traces only), loaded once (a failure too). HTA reads files,
        not dicts: it is given the file itself (one file as rank 0), or a temporary copy of the dict (a trimmed
        trace, or a dict)."""
        self._need_gpu("GPU time views")
        return self._once("_hta", self._load_hta)

    def _load_hta(self):
        try:
            from hta.trace_analysis import TraceAnalysis
        except ImportError as exc:  # pragma: no cover - it is a declared dependency
            raise TraceError(f"Holistic Trace Analysis is not installed ({exc}); pip install traceinsight") from None
        tmp = None
        path = self.path
        if path is None or self.trimmed:
            fd, tmp = tempfile.mkstemp(suffix=".json")
            with os.fdopen(fd, "w") as f, no_gc():
                f.write(json.dumps(self.doc))   # json.dumps runs the C encoder; json.dump the Python one (5x slower)
            path = Path(tmp)
        try:
            with quiet("hta"), no_gc():
                return TraceAnalysis(trace_files={0: str(Path(path).resolve())}, trace_dir="/")
        except Exception as exc:  # noqa: BLE001 - the library's failure becomes one line
            raise TraceError(f"{self.label}: Holistic Trace Analysis could not load this trace "
                             f"({_why(exc)})") from None
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
            raise TraceError(f"{self.label}: Holistic Trace Analysis' {what} failed ({_why(exc)})") from None

    def gpu_breakdown(self) -> dict[str, float] | None:
        """HTA's temporal breakdown of the GPU's time: ``{"idle_pct", "compute_pct", "non_compute_pct"}``
        (percent of the profiled time; HTA leaves out the last ProfilerStep). None on a CPU-only trace."""
        if not self.has_gpu:
            return None
        df = self._hta_call("temporal breakdown", lambda a: a.get_temporal_breakdown(visualize=False))
        r = df.iloc[0]
        return {"idle_pct": float(r["idle_time_pctg"]), "compute_pct": float(r["compute_time_pctg"]),
                "non_compute_pct": float(r["non_compute_time_pctg"])}

    def idle_breakdown(self):
        """HTA's idle-time breakdown per GPU stream: ``stream, idle_category`` (host_wait: the GPU waited for
        the CPU to launch; kernel_wait: short gaps between kernels; other), ``idle_ms, idle_share``."""
        df, _ = self._hta_call("idle time breakdown", lambda a: a.get_idle_time_breakdown(visualize=False))
        return df.rename(columns={"idle_time": "idle_ms", "idle_time_ratio": "idle_share"}).assign(
            idle_ms=lambda d: d["idle_ms"] / 1000.0).drop(columns=["rank"], errors="ignore")

    def launch_stats(self):
        """HTA's kernel launch statistics, one row per launch: ``correlation, cpu_duration_us`` (the launch
        call), ``gpu_duration_us`` (the kernel), ``launch_delay_us`` (launch call to kernel start)."""
        stats = self._hta_call("kernel launch statistics", lambda a: a.get_cuda_kernel_launch_stats(visualize=False))
        if not stats:
            raise TraceError(f"{self.label}: HTA found no kernel launches in this trace")
        df = next(iter(stats.values()))
        return df.rename(columns={"cpu_duration": "cpu_duration_us", "gpu_duration": "gpu_duration_us",
                                  "launch_delay": "launch_delay_us"})

    def launch_summary(self) -> dict[str, float]:
        """HTA's launch statistics in one row: ``launches``, the medians of ``cpu_duration_us`` (launch call),
        ``gpu_duration_us`` (kernel) and ``launch_delay_us``, and ``short_kernel_share``: the share of kernels
        that run for less time than their launch call took (the CPU cannot keep such a GPU busy)."""
        df = self.launch_stats()
        return {"launches": int(len(df)), "cpu_duration_us": float(df["cpu_duration_us"].median()),
                "gpu_duration_us": float(df["gpu_duration_us"].median()),
                "launch_delay_us": float(df["launch_delay_us"].median()),
                "short_kernel_share": float((df["gpu_duration_us"] < df["cpu_duration_us"]).mean())}

    # ---- timeline -------------------------------------------------------------------------------------------
    def timeline(self, steps: int = 3, title: str | None = None):
        """A Perfetto-like picture of the first ``steps`` ProfilerSteps (matplotlib ``Figure``): one lane per
        host thread (operators in greys, nested by depth; DataLoader waits in orange), a lane of synchronisations
        (red; the profiling loop's own, one ending each step, in slate grey: ``timeline.sync_split``), and one lane
        per GPU stream (kernels blue, copies green, memsets purple). ``title`` names the
        experiment (the default: "Profiled steps"); the legend lists only what is drawn."""
        return draw_timeline(self.doc, steps=steps, title=title)


def open_trace(src: Any, max_steps: int | None = MAX_STEPS) -> Trace:
    """A ``Trace`` from a path (``.json`` / ``.json.gz`` / a ``tensorboard_trace_handler`` folder), a loaded
    trace dict, or a ``Trace`` (returned as it is). A long trace is cut to its first ``max_steps`` steps (fewer
    when they are very heavy; see ``trim``) and a note says so; ``max_steps=None`` keeps every step. Bad input
    raises ``TraceError`` with a one-line message."""
    if isinstance(src, Trace):
        return src
    if isinstance(src, dict):
        if not isinstance(src.get("traceEvents"), list):
            raise TraceError("the dict given is not a Chrome trace (no traceEvents list); pass what load_trace returns")
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
        doc, note = trim(doc, max_steps=max_steps, max_events=None if max_steps is None else MAX_EVENTS)
    if note:
        notes.append(f"{path or 'the trace'}: {note}")
    return Trace(doc, path, notes, trimmed=bool(note))
