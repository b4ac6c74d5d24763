"""How often the doctor is right: ``python benchmarks/doctor_accuracy.py [--rounds 20] [--repeats 2]
[--no-write]`` (or ``python -m benchmarks.doctor_accuracy``), by hand, not by ``make test`` (it profiles 2 × 27
runs of 22 training steps and times each plant's step against its step without it: about two minutes on 2 cores;
the savings depend on the machine).

A labelled corpus, each entry with the cause it is known to have (``label``) and how that is known (``how``):

- **planted** (made here, on the CPU, one intra-op thread): notebook 05's MLP training step with plants of known size
  (``plant``): a DataLoader whose samples cost busy host time (``input``), thousands of tiny ops (``launch/overhead``),
  one large matrix product (``compute``), each alone at three strengths (``STRENGTHS``: about 15%, 50% and 85% of the
  step), two at once (``MIXES``: the larger plant is the label), and none (a second profile of the unplanted step).
  Each plant's strength is calibrated on this machine (``calibrate``) from the unplanted step's CPU time.
- **h100**: the H100 reference's traces (``data/reference/h100/*/traces``), labelled by what their notebook planted
  (05) or measured (01, 02, 03: ``h100_entries`` says which reading of its ``results.json`` gives the label).
- **tracelens**: TraceLens' traces in ``../shared/traces/tracelens/`` (others' data, read in place, never copied),
  labelled from TraceLens' own ``gpu_timeline.csv``: ``compute`` where its computation time is the larger part of the
  window, ``GPU idle`` (any idle cause: input, host sync, launch/overhead, memory) where idle is.

What the doctor *names* (``named_cause``): for an entry with an unplanted *base* profiled beside it (every planted
entry, against the base profiled just before it; 05's reference plants against 05's ``none``), the cause with the
largest plant share (``plant_shares``: each cause's median share of a step, less the base's share scaled by the
base's median step over the planted one's), or ``none`` under ``MIN_FINDING_SHARE`` of the step; for the others, its top cause (``none``
where it judges none; ``not judged`` where its headline says the idle it cannot attribute outweighs the top cause).
The confusion matrix counts label × named cause.

The saving (``savings``): for each plant of each planted entry, the step with the plant and the step without it are
timed unprofiled, in interleaved rounds, on the process's CPU time with one intra-op thread
(``helpers.measure.timing.interleaved_times(cpu_time=True)``); the measured saving is the difference of their means
(with a 95% half-width), as a share of the timed step. The doctor's side is its share of the step for the plant's
cause (the most fixing it could save) and, against the base, its share for the plant (``plant_shares``). The H100
reference's 05 plants add the savings their notebook measured (wall time on the H100, ``timed:`` rows of its
``results.json``).

The planted corpus is profiled ``--repeats`` times (default 2): the first profile is counted, the others' readings
are shown beside it (``again``), so the spread from one profile to the next on a loaded machine is in the table.

The script writes its tables between ``START`` and ``END`` in ``docs/doctor.md`` (``--no-write``: prints them), with
the date, the machine and the commit: never typed. ``tests/traces/test_accuracy.py`` regenerates them on a subset.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
for p in (
    ROOT,
    ROOT / "doctor",
):  # the doctor and the lab's helpers from this checkout, installed or not
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from perf_doctor.diagnosis import CAUSES, MIN_FINDING_SHARE, diagnose  # noqa: E402

DOCS = ROOT / "docs" / "doctor.md"
START = (
    "<!-- doctor-accuracy:start (written by benchmarks/doctor_accuracy.py: do not edit by hand) -->"
)
END = "<!-- doctor-accuracy:end -->"
SHARED = Path(os.environ.get("PERF_SHARED_DIR") or ROOT.parent / "shared")
REFERENCE = ROOT / "data" / "reference" / "h100"

IDLE = "GPU idle"  # a TraceLens label: the GPU idle most of the window, whatever the host did
IDLE_CAUSES = ("input", "host sync", "launch/overhead", "memory")
NONE, NOT_JUDGED = "none", "not judged"
LABELS = (*CAUSES, IDLE, NONE)  # the matrix's rows, in this order
NAMED = (*CAUSES, NONE, NOT_JUDGED)  # its columns

# planted steps: notebook 05's MLP (batch x FEATURES -> HIDDEN -> 10), sized so the unplanted step takes ~10-20 ms
BATCH, FEATURES, HIDDEN = 128, 256, 1024
STRENGTHS = (0.15, 0.5, 0.85)  # a single plant's share of the step
# two plants at once (the larger is the label)
MIXES = ({"input": 0.45, "compute": 0.2}, {"compute": 0.45, "input": 0.2})
MIXES += ({"launch/overhead": 0.45, "input": 0.2},)
WAIT, WARMUP, ACTIVE = 1, 1, 20  # the profiler's schedule for each planted entry


# --- planted steps ----------------------------------------------------------------------------------------------
def host_work(ms: float) -> None:
    """``ms`` of this thread's CPU time, busy (a sleep would free the CPU, and process CPU time would not see it)."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


def plant(input_ms: float = 0.0, tiny_ops: int = 0, matmul: int = 0) -> Callable[[], Any]:
    """Notebook 05's ``plant`` on the CPU: the MLP's training step with ``input_ms`` of busy host time per batch in
    its DataLoader's samples, ``tiny_ops`` elementwise ops on 16 numbers, a ``matmul``² product (0: not planted),
    run with one intra-op thread."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    from helpers.measure.timing import torch_threads
    from helpers.measure.training import training_step

    class SlowSamples(Dataset):
        def __len__(self):
            return 100_000

        def __getitem__(self, i):
            host_work(input_ms / BATCH)
            return torch.randn(FEATURES), i % 10

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)
            )
            self.tiny = torch.nn.Parameter(torch.ones(16))
            self.big = (
                torch.nn.Parameter(torch.randn(matmul, matmul) / matmul**0.5) if matmul else None
            )

        def forward(self, x):
            out, t = self.net(x), self.tiny
            for _ in range(tiny_ops):
                t = t * 1.0001
            if self.big is not None:
                out = out + (self.big @ self.big).mean() * 0.0
            return out + t.sum() * 0.0 if tiny_ops else out

    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = (torch.randn(BATCH, FEATURES), torch.randint(0, 10, (BATCH,)))
    data = DataLoader(SlowSamples(), batch_size=BATCH) if input_ms else [batch]
    train = training_step(model, opt, data)

    def step():
        with torch_threads(1):
            return train()

    return step


def cpu_ms(step: Callable[[], Any], n: int = 5) -> float:
    """The median process CPU time of ``n`` calls of ``step`` (after one untimed call), in ms."""
    step()
    out = []
    for _ in range(n):
        t = time.process_time()
        step()
        out.append((time.process_time() - t) * 1000)
    return sorted(out)[n // 2]


def calibrate() -> dict[str, Any]:
    """This machine's costs: the unplanted step's ms, and the ms that 1,000 tiny ops and a 512² product add."""
    base = cpu_ms(plant())
    return {
        "base_ms": base,
        "tiny_ms_per_1000": max(cpu_ms(plant(tiny_ops=1000)) - base, 1e-3),
        "matmul_ms_512": max(cpu_ms(plant(matmul=512)) - base, 1e-3),
        "input_ms_per_ms": max(cpu_ms(plant(input_ms=10.0)) - base, 1e-3) / 10.0,
    }


def sizes_for(shares: dict[str, float], cal: dict[str, Any]) -> dict[str, Any]:
    """``plant``'s arguments that make each cause's plant ``shares[cause]`` of the planted step on this machine."""
    rest = 1.0 - sum(shares.values())
    out: dict[str, Any] = {}
    for cause, s in shares.items():
        ms = s / rest * cal["base_ms"]
        if cause == "input":
            out["input_ms"] = round(ms / cal["input_ms_per_ms"], 2)
        elif cause == "launch/overhead":
            out["tiny_ops"] = max(1, round(1000 * ms / cal["tiny_ms_per_1000"]))
        elif cause == "compute":
            out["matmul"] = max(16, round(512 * (ms / cal["matmul_ms_512"]) ** (1 / 3)))
    return out


ARG = {"input": "input_ms", "launch/overhead": "tiny_ops", "compute": "matmul"}


# --- the corpus -------------------------------------------------------------------------------------------------
@dataclass
class Entry:
    """One labelled trace. ``base``: the entry whose reading is subtracted (None: the headline is read);
    ``plants``: {cause: ``plant`` kwargs without it} for the savings; ``saved``: {cause: (ms, half-width)} measured
    elsewhere (the H100 reference); ``claimed`` / ``reading``: {cause: share} (filled by ``read``)."""

    name: str
    source: str
    label: str
    how: str
    trace: Path | None = None
    base: str | None = None
    kwargs: dict[str, Any] | None = None  # planted: plant(**kwargs)
    plants: dict[str, dict[str, Any]] = field(default_factory=dict)
    saved: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    named: str | None = None
    top: str | None = None
    step_ms: float | None = None
    claimed: dict[str, float] = field(default_factory=dict)
    reading: dict[str, float] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)  # the plants' target shares
    base_trace: Path | None = (
        None  # the base profiled again just before this entry (planted: ``profile``)
    )
    timed_ms: float | None = None
    again: list[tuple[str, dict[str, float]]] = field(
        default_factory=list
    )  # (named, reading) of each repeat  # the planted step's mean CPU time, unprofiled (``time_savings``)


def planted_entries(cal: dict[str, Any], which: set[str] | None = None) -> list[Entry]:
    """The planted corpus (``which``: only these names; None: all): the base, none, each single plant at each
    strength, the mixes. Profiled later (``profile``)."""
    out = [
        Entry("base (nothing planted)", "planted", NONE, "nothing planted", kwargs={}),
        Entry("none", "planted", NONE, "nothing planted (profiled again)", kwargs={}),
    ]
    for cause in ARG:
        for s in STRENGTHS:
            kw = sizes_for({cause: s}, cal)
            out.append(
                Entry(
                    f"{cause} {s:.0%}",
                    "planted",
                    cause,
                    f"planted {cause} ({ARG[cause]}={kw[ARG[cause]]}), ~{s:.0%} of the step",
                    kwargs=kw,
                    plants={cause: {}},
                    shares={cause: s},
                )
            )
    for mix in MIXES:
        kw = sizes_for(mix, cal)
        label = max(mix, key=mix.get)
        parts = " + ".join(f"{c} ~{s:.0%}" for c, s in mix.items())
        out.append(
            Entry(
                "mixed " + " + ".join(f"{c} {s:.0%}" for c, s in mix.items()),
                "planted",
                label,
                f"planted {parts} (label: the larger)",
                kwargs=kw,
                plants={c: {k: v for k, v in kw.items() if k != ARG[c]} for c in mix},
                shares=dict(mix),
            )
        )
    for e in out[1:]:
        e.base = out[0].name
    return [e for e in out if which is None or e.name in which or e.base is None]


def _one(folder: Path) -> Path | None:
    found = sorted(folder.glob("*/*.json.gz")) + sorted(folder.glob("*.json.gz"))
    found = [p for p in found if p.name != "chrome_trace.json.gz"]
    return found[0] if found else None


def _results(nb: str) -> dict[str, Any]:
    path = REFERENCE / nb / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _metric(res: dict, name: str, key: str):
    row = next((e for e in res.get("experiments", []) if e["name"] == name), None)
    return (row or {}).get("metrics", {}).get(key)


def h100_entries() -> list[Entry]:
    """The H100 reference's traces, labelled from their notebook's ``results.json`` (absent: none)."""
    traces = REFERENCE
    out: list[Entry] = []
    r5 = _results("05_diagnose")
    t = lambda n: _metric(r5, f"timed: {n}", "step_ms_mean")  # noqa: E731 - a timed row's mean step
    none_ms = t("nothing planted")
    f5 = traces / "05_diagnose" / "traces"
    base = Entry(
        "05 none",
        "h100",
        NONE,
        "05 planted nothing (its unplanted step)",
        _one(f5 / "05_diagnose_none"),
    )
    out.append(base)
    if none_ms is not None and (p := _one(f5 / "05_diagnose_input")):
        e = Entry("05 input", "h100", "input", "05 planted a DataLoader at 1 ms a sample", p)
        e.saved["input"] = (t("planted input (size 1)") - none_ms, None)
        e.timed_ms = t("planted input (size 1)")
        out.append(e)
    if none_ms is not None and (p := _one(f5 / "05_diagnose_compute")):
        e = Entry("05 compute", "h100", "compute", "05 planted an 8192² FP32 product", p)
        e.saved["compute"] = (t("planted compute (size 8192)") - none_ms, None)
        e.timed_ms = t("planted compute (size 8192)")
        out.append(e)
    if none_ms is not None and (p := _one(f5 / "05_diagnose_host_sync")):
        sync, free = (
            t("planted host sync (size 20)"),
            t("planted host sync (size 20) without .item()"),
        )
        e = Entry(
            "05 host sync",
            "h100",
            "compute",
            "05 planted .item() + 20 ms of host work beside the 8192² product: mixed, the product larger "
            "(its timed rows)",
            p,
        )
        e.saved = {"compute": (free - none_ms, None), "host sync": (sync - free, None)}
        e.timed_ms = sync
        out.append(e)
    for e in out[1:]:
        e.base = base.name
    r1 = _results("01_profiler_basics")
    dev = (_metric(r1, "profiled_step", "forward_ms_per_step") or 0) + (
        _metric(r1, "profiled_step", "backward_ms_per_step") or 0
    )
    cpu = _metric(r1, "profiled_step", "step_cpu_ms_mean")
    p = _one(traces / "01_profiler_basics" / "traces" / "01_profiler_basics_train_step")
    if p and cpu is not None:
        out.append(
            Entry(
                "01 train step",
                "h100",
                "compute" if dev > cpu else "launch/overhead",
                f"01 measured {dev:.1f} ms of device time per step against {cpu:.1f} ms of host time",
                p,
            )
        )
    r2 = _results("02_data_pipeline")
    ceiling = _metric(r2, "ceiling", "step_ms_mean")  # the step with its data already on the device
    for folder in sorted((traces / "02_data_pipeline" / "traces").glob("*_nw0")):
        variant = folder.name.removeprefix("02_data_pipeline_").removesuffix("_nw0")
        row = next(
            (e for e in r2.get("experiments", []) if e["name"] == f"profile {variant} nw=0"), None
        )
        if row is None or ceiling is None or not (p := _one(folder)):
            continue
        per_batch = row["config"]["batch_size"] * sum(
            v for k, v in row["metrics"].items() if k.endswith("_ms_per_sample")
        )
        out.append(
            Entry(
                f"02 {variant} nw=0",
                "h100",
                "input" if per_batch > ceiling else "compute",
                f"02 measured its pipeline's stages at {per_batch:.0f} ms a batch in the main process, the "
                f"step with data in memory {ceiling:.0f} ms",
                p,
            )
        )
    r3 = _results("03_backward_hooks")
    syncs = [e["metrics"].get("syncs_per_step") for e in r3.get("experiments", [])]
    for folder in sorted((traces / "03_backward_hooks" / "traces").glob("03_*")):
        if not (p := _one(folder)) or any(s not in (0, 0.0, None) for s in syncs):
            continue
        out.append(
            Entry(
                "03 " + folder.name.removeprefix("03_backward_hooks_"),
                "h100",
                "compute",
                "03 counted 0 syncs and 0 ms of GPU idle after them per step; a ViT step of 163-171 ms "
                "timed synchronised, ~1 ms of it host work in select_backward",
                p,
            )
        )
    return [e for e in out if e.trace is not None]


def tracelens_entries() -> list[Entry]:
    """TraceLens' traces, each labelled from its ``gpu_timeline.csv`` (absent folder: none)."""
    root = SHARED / "traces" / "tracelens"
    out = []
    for c in sorted(root.rglob("gpu_timeline.csv")) if root.exists() else []:
        traces = sorted(c.parent.parent.glob("*.json.gz"))
        stem = c.parent.name.removesuffix("_perf_report_csvs")
        pick = [t for t in traces if t.name.removesuffix(".json.gz") == stem] or traces
        with open(c) as f:
            tl = {r["type"]: float(r["percent"]) for r in csv.DictReader(f)}
        label = "compute" if tl["computation_time"] >= tl["idle_time"] else IDLE
        name = str(pick[0].relative_to(root)).removesuffix(".json.gz")
        out.append(
            Entry(
                name,
                "tracelens",
                label,
                f"TraceLens' timeline: computation {tl['computation_time']:.1f}%, idle "
                f"{tl['idle_time']:.1f}% of its window",
                pick[0],
            )
        )
    return out


# --- reading --------------------------------------------------------------------------------------------------
def profile(entries: list[Entry], folder: Path) -> None:
    """Profile each planted entry into ``folder`` (its ``trace``), each read against the base profiled just before
    it (``base_trace``): the machine's load drifts, and a plant is read against the base under the same load."""
    from helpers.measure.profiling import profile_steps, trace_files

    def one(kwargs, out: Path) -> Path:
        profile_steps(
            plant(**kwargs), wait=WAIT, warmup=WARMUP, active=ACTIVE, trace_dir=out, sync=False
        )
        return trace_files(out)[0]

    by = {e.name: e for e in entries}
    for i, e in enumerate(x for x in entries if x.kwargs is not None):
        if e.base is not None:
            e.base_trace = one(by[e.base].kwargs, folder / f"{i:02d}-base")
        e.trace = one(e.kwargs, folder / f"{i:02d}")


def unjudged(d) -> bool:
    """The headline's *Not judged*: idle the doctor cannot attribute outweighs its top cause."""
    un = next((c.get("unattributed_idle_ms") for c in d.causes if c["cause"] == "compute"), None)
    top = next((c["ms"] for c in d.causes if c["ms"] is not None), None)
    return bool(un and top is not None and un > top)


def step_shares(d) -> dict[str, float]:
    """Each judged cause's share of the step: the median over the steps (``per_step``), so that a burst of the
    machine's load in one step moves it little; the mean step's where the steps are not recorded."""
    out = {}
    for c in CAUSES:
        if d.ms(c) is None:
            continue
        each = getattr(d, "per_step", {}).get(c)
        times = getattr(d, "step_times", [])
        if each and len(each) == len(times) and all(t > 0 for t in times):
            out[c] = statistics.median(x / t for x, t in zip(each, times))
        else:
            out[c] = (d.ms(c) or 0.0) / d.step_ms
    return out


def plant_shares(d, base) -> dict[str, float]:
    """The share of ``d``'s step each cause's plant holds, read against the unplanted ``base``: the planted step is
    the base's work, ``R`` of the step, plus the plants, so a cause's share is ``p + R·b`` (``b``: its share of the
    base) and ``p = share - R·b``; ``R`` is the base's median step over the planted one's (at most 1). Shares and
    medians (``step_shares``): a burst of the machine's load in one step moves them little."""
    s, b = step_shares(d), step_shares(base)
    steps = lambda x: statistics.median(x.step_times) if x.step_times else x.step_ms  # noqa: E731
    rest = min(1.0, steps(base) / steps(d))
    return {c: s[c] - rest * b.get(c, 0.0) for c in s}


def named_cause(d, base=None) -> str:
    """What the doctor names: against ``base``, the cause with the largest plant share (``plant_shares``; ``none``
    under ``MIN_FINDING_SHARE``); alone, its top cause (``none``, ``not judged``)."""
    if d.nothing or d.damaged or d.top is None:
        return NONE
    if base is None:
        return NOT_JUDGED if unjudged(d) else d.top
    p = plant_shares(d, base)
    cause = max(p, key=p.get)
    return cause if p[cause] >= MIN_FINDING_SHARE else NONE


def read(entries: list[Entry]) -> None:
    """Diagnose every entry: ``named``, ``top``, ``step_ms``; per plant ``claimed`` (the share of the step the
    doctor gives its cause: the most fixing it could save) and ``reading`` (its plant share against the base)."""
    ds = {e.name: diagnose(e.trace) for e in entries}
    for e in entries:
        d, b = ds[e.name], ds.get(e.base) if e.base else None
        b = diagnose(e.base_trace) if e.base_trace is not None else b
        e.named, e.top, e.step_ms = named_cause(d, b), d.top, d.step_ms
        p = plant_shares(d, b) if b is not None else {}
        for c in {*e.plants, *e.saved}:
            e.claimed[c] = (d.ms(c) or 0.0) / d.step_ms
            e.reading[c] = p.get(c, e.claimed[c])


def correct(label: str, named: str) -> bool:
    """The named cause is the label (a ``GPU idle`` label: any idle cause)."""
    return named == label or (label == IDLE and named in IDLE_CAUSES)


def scored(entries: list[Entry]) -> list[Entry]:
    """The entries the matrix counts: all but a base (it is the reference the others are read against)."""
    bases = {e.base for e in entries}
    return [e for e in entries if e.name not in bases]


def confusion(entries: list[Entry]) -> dict[str, dict[str, int]]:
    """``{label: {named: count}}`` over ``scored(entries)``, in ``LABELS`` × ``NAMED`` order (empty rows left out)."""
    m = {r: dict.fromkeys(NAMED, 0) for r in LABELS}
    for e in scored(entries):
        m[e.label][e.named] += 1
    return {r: row for r, row in m.items() if any(row.values())}


def on_diagonal(m: dict[str, dict[str, int]]) -> int:
    """How many entries the matrix has where ``correct``."""
    return sum(n for r, row in m.items() for c, n in row.items() if correct(r, c))


def time_savings(entries: list[Entry], rounds: int, untimed: int = 2) -> None:
    """Each planted entry's step and its step without each plant, timed in interleaved rounds on process CPU time
    (one intra-op thread): ``saved[cause] = (mean with - mean without, 95% half-width)``."""
    import torch

    from helpers.measure.timing import interleaved_times, torch_threads

    steps: dict[str, Callable] = {}
    pairs = []
    for e in entries:
        for c, without in e.plants.items():
            a, b = json.dumps(e.kwargs, sort_keys=True), json.dumps(without, sort_keys=True)
            steps.setdefault(a, plant(**e.kwargs))
            steps.setdefault(b, plant(**without))
            pairs.append((e, c, a, b))
    if not steps:
        return
    with torch_threads(1):
        assert torch.get_num_threads() == 1
        timed = interleaved_times(steps, rounds, warmup=untimed, cpu_time=True)
    for e, c, a, b in pairs:
        x, y = timed[a].times_ms, timed[b].times_ms
        var = lambda v: sum((t - sum(v) / len(v)) ** 2 for t in v) / max(len(v) - 1, 1)  # noqa: E731
        hw = 1.96 * math.sqrt(var(x) / len(x) + var(y) / len(y))
        e.saved[c] = (sum(x) / len(x) - sum(y) / len(y), hw)
        e.timed_ms = sum(x) / len(x)


# --- the tables -------------------------------------------------------------------------------------------------
def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def matrix_table(m: dict[str, dict[str, int]]) -> list[str]:
    """The confusion matrix as markdown: one row per label, one column per named cause, then ``right``."""
    head = ["label \\ named", *NAMED, "right"]
    lines = [_row(head), _row(["---"] * len(head))]
    for r, row in m.items():
        right = sum(n for c, n in row.items() if correct(r, c))
        cells = [
            f"**{n}**" if n and correct(r, c) else (str(n) if n else "·") for c, n in row.items()
        ]
        lines.append(_row([r, *cells, f"{right}/{sum(row.values())}"]))
    return lines


CORPUS_HEAD = [
    "entry",
    "source",
    "label",
    "how labelled",
    "read",
    "named",
    "again",
    "top cause",
    "step (ms)",
]
SAVINGS_HEAD = [
    "entry",
    "plant",
    "doctor: its cause",
    "doctor: the plant",
    "again",
    "measured saving",
    "error (points)",
    "measured (ms)",
]


def corpus_table(entries: list[Entry]) -> list[str]:
    lines = [_row(CORPUS_HEAD), _row(["---"] * len(CORPUS_HEAD))]
    for e in entries:
        read = (
            "base" if e.name in {x.base for x in entries} else (f"vs {e.base}" if e.base else "top")
        )
        mark = "" if read == "base" else (" ✓" if correct(e.label, e.named) else " ✗")
        lines.append(
            _row(
                [
                    e.name,
                    e.source,
                    e.label,
                    e.how,
                    read,
                    f"{e.named}{mark}",
                    " / ".join(n for n, _ in e.again) or "·",
                    e.top,
                    f"{e.step_ms:.2f}",
                ]
            )
        )
    return lines


def saving_rows(entries: list[Entry]) -> list[dict[str, Any]]:
    """One row per plant with a measured saving, as shares of the step: the doctor's share for its cause
    (``claimed``), its plant share against the base (``reading``), the measured saving over the timed step."""
    rows = []
    for e in entries:
        for c, (ms, hw) in e.saved.items():
            if c not in e.reading or not e.timed_ms:
                continue
            rows.append(
                {
                    "entry": e.name,
                    "plant": c,
                    "claimed": e.claimed[c],
                    "reading": e.reading[c],
                    "measured": ms / e.timed_ms,
                    "ms": ms,
                    "hw": hw,
                    "error": e.reading[c] - ms / e.timed_ms,
                    "again": [r[c] - ms / e.timed_ms for _, r in e.again if c in r],
                    "again_reading": [r[c] for _, r in e.again if c in r],
                }
            )
    return rows


def savings_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [_row(SAVINGS_HEAD), _row(["---"] * len(SAVINGS_HEAD))]
    for r in rows:
        ms = f"{r['ms']:.2f}" + (f" ± {r['hw']:.2f}" if r["hw"] is not None else "")
        lines.append(
            _row(
                [
                    r["entry"],
                    r["plant"],
                    f"{r['claimed']:.0%}",
                    f"{r['reading']:.0%}",
                    " / ".join(f"{x:.0%}" for x in r["again_reading"]) or "·",
                    f"{r['measured']:.0%}",
                    f"{100 * r['error']:+.1f}",
                    ms,
                ]
            )
        )
    return lines


def machine() -> str:
    """This machine in words: CPU model, cores, Python and torch."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    import torch

    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"


def commit() -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes outside docs/)."""
    git = ["git", "-C", str(ROOT)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def render(entries: list[Entry], rounds: int, cal: dict[str, Any] | None, repeats: int = 2) -> str:
    """The block written between ``START`` and ``END``: provenance, the matrix, the savings, the corpus."""
    m = confusion(entries)
    n = len(scored(entries))
    rows = saving_rows(entries)
    mae = lambda rs: sum(abs(r["error"]) for r in rs) / len(rs) if rs else float("nan")  # noqa: E731
    repeats_done = max((len(e.again) for e in entries), default=0)
    agains = [
        mae([dict(r, error=r["again"][i]) for r in rows if len(r["again"]) > i])
        for i in range(repeats_done)
    ]
    redone = [e for e in scored(entries) if e.again]
    alike = sum(all(n == e.named for n, _ in e.again) for e in redone)
    here = [r for r in rows if r["hw"] is not None]  # planted here (the H100's have no half-width)
    weak = [
        r for e in entries for r in here if r["entry"] == e.name and min(e.shares.values()) < 0.3
    ]
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        START,
        "",
        f"Written by `python benchmarks/doctor_accuracy.py --rounds {rounds} --repeats {repeats}` on {when}, "
        f"{machine()}, commit {commit()}."
        + (
            f" Planted steps calibrated here: the unplanted step {cal['base_ms']:.2f} ms of CPU time."
            if cal
            else ""
        ),
        "",
        f"**Confusion matrix** ({n} entries; bold: right; `GPU idle` is right for any idle cause): "
        f"{on_diagonal(m)} of {n} right"
        + (
            f"; the planted corpus profiled {repeats_done + 1} times, {alike} of its {len(redone)} entries "
            "are named alike every time (`again`: the other profiles' readings)."
            if redone
            else "."
        ),
        "",
        *matrix_table(m),
        "",
        "**Savings**, as shares of the step: the doctor's share for the plant's cause (the most fixing it could "
        "save), its share for the plant read against the base (`plant_shares`), and the saving measured when the "
        f"plant is removed (planted here: {rounds} interleaved rounds of process CPU time, one thread, the mean "
        "difference ± its 95% half-width; the H100 rows: its notebook's timed rows, wall time, 20 rounds). "
        f"Mean absolute error of the plant share: {100 * mae(here):.1f} points over the {len(here)} plants made "
        f"here ({100 * mae(weak):.1f} over the {len(weak)} at under 30% of the step"
        + "".join(f"; profiled again: {100 * a:.1f}" for a in agains)
        + "), "
        f"{100 * mae([r for r in rows if r not in here]):.1f} over the H100's.",
        "",
        *savings_table(rows),
        "",
        "**Corpus** (`read`: the base a planted entry is read against, or the doctor's top cause alone):",
        "",
        *corpus_table(entries),
        "",
        END,
    ]
    return "\n".join(lines)


def write_docs(block: str, path: Path = DOCS) -> None:
    """Replace the text between ``START`` and ``END`` in ``path`` by ``block`` (markers included)."""
    text = path.read_text()
    pat = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pat.search(text):
        raise SystemExit(f"{path}: no {START!r} ... {END!r} block to replace")
    path.write_text(pat.sub(lambda _: block, text, count=1))


def tables(block: str) -> list[list[list[str]]]:
    """The markdown tables in ``block``: each a list of rows of cells, its separator row left out."""
    out: list[list[list[str]]] = []
    prev = False
    for line in block.splitlines():
        row = line.startswith("| ")
        if row and not set(line) <= set("|- "):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            (out[-1].append(cells) if prev else out.append([cells]))
        prev = row
    return out


def docs_block(path: Path = DOCS) -> str | None:
    """The block between the markers in ``path`` (None: none)."""
    m = re.search(re.escape(START) + ".*?" + re.escape(END), path.read_text(), re.S)
    return m.group(0) if m else None


def run(
    rounds: int = 20,
    which: set[str] | None = None,
    real: bool = True,
    folder: Path | None = None,
    repeats: int = 2,
) -> tuple[list[Entry], dict[str, Any]]:
    """Build, profile, read and time the corpus (``which``: only these planted entries; ``real``: with the H100
    and TraceLens traces; ``repeats``: the planted entries profiled and read that many times, the first counted,
    the others in ``again``); the entries and the calibration."""
    cal = calibrate()
    entries = planted_entries(cal, which)
    with tempfile.TemporaryDirectory(prefix="doctor_accuracy_", dir=folder) as tmp:
        profile(entries, Path(tmp) / "0")
        for r in range(1, repeats):
            redo = planted_entries(cal, which)
            profile(redo, Path(tmp) / str(r))
            read(redo)
            for e, f in zip(entries, redo):
                e.again.append((f.named, dict(f.reading)))
        entries += (h100_entries() + tracelens_entries()) if real else []
        read(entries)
    time_savings(entries, rounds)
    return entries, cal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds (default 20)")
    ap.add_argument(
        "--repeats", type=int, default=2, help="profiles of the planted corpus (default 2)"
    )
    ap.add_argument(
        "--no-write", action="store_true", help="print the tables, leave docs/doctor.md"
    )
    args = ap.parse_args(argv)
    t0 = time.time()
    entries, cal = run(args.rounds, repeats=args.repeats)
    block = render(entries, args.rounds, cal, args.repeats)
    print(block)
    if not args.no_write:
        write_docs(block)
        print(f"written to {DOCS} ({time.time() - t0:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
