"""A reference GPU's numbers beside the reader's, never instead of them.

A reference run is a notebook's pack from a GPU machine (``python -m helpers.runner``, ``helpers.notebook.pack``)
unpacked under ``data/reference/<gpu>/``: ``<gpu>/<notebook>/results.json``, its figures (``*.png``), its executed
copy and ``traces/``. ``$PERF_REFERENCE_DIR`` moves the root; ``$PERF_REFERENCE_GPU`` picks a ``<gpu>`` folder.

How a notebook uses it (``NB`` is its results name, ``RESULTS`` its ``Results``)::

    REF = reference.note(NB)        # prints where the reference comes from, or that there is none; None then
    table = reference.add_column(RESULTS.table(COLUMNS), REF, "step_ms_mean")   # + "reference (h100): ..." column
    reference.show_figures(REF, ["sawtooth"])    # GPU-only sections on a CPU: the reference's figures, labelled
    reference.show_trace(REF, "baseline")        # and its trace, opened with helpers.traces.show, labelled

Every function takes ``None`` (no reference) and then adds nothing, with one line saying so where it would have
shown something. Rows are matched by experiment name; the reference ran at its own scale (``ref.scale``, full on a
GPU), so its values sit beside the reader's as another machine's, not as the expected result.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .display import header

ROOT_ENV = "PERF_REFERENCE_DIR"
GPU_ENV = "PERF_REFERENCE_GPU"
TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz", ".json", ".json.gz")


def reference_root() -> Path:
    """``$PERF_REFERENCE_DIR`` or the project's ``data/reference``."""
    env = os.environ.get(ROOT_ENV, "").strip()
    if env:
        return Path(env)
    from .env import project_root

    return project_root() / "data" / "reference"


@dataclass
class Reference:
    """One notebook's reference run: ``gpu`` (its folder name), ``dir`` and ``doc`` (its results.json)."""

    gpu: str
    dir: Path
    doc: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        return f"reference ({self.gpu})"

    @property
    def scale(self) -> str | None:
        return self.doc.get("scale")

    def source(self) -> str:
        """Where the numbers come from: the GPU's name, torch, scale and whether the run was cut short."""
        env = self.doc.get("env", {})
        bits = [env.get("device_name") or env.get("device") or "unknown device", f"torch {env.get('torch', '?')}",
                f"{self.scale or '?'} scale"]
        if self.doc.get("interrupted"):
            bits.append("interrupted: some experiments missing")
        return f"{self.gpu} ({', '.join(bits)})"

    def row(self, name: str) -> dict[str, Any] | None:
        for e in reversed(self.doc.get("experiments", [])):
            if e.get("name") == name:
                return e
        return None

    def metric(self, name: str, key: str) -> Any:
        """The reference's value of ``key`` for the experiment ``name`` (None when absent or failed there)."""
        row = self.row(name)
        if row is None or row.get("status") != "ok":
            return None
        return row.get("metrics", {}).get(key)

    def figures(self, names: Iterable[str] | None = None) -> list[Path]:
        """Its figures (``*.png``), all or those whose stem is in ``names`` (in that order)."""
        found = {p.stem: p for p in sorted(self.dir.glob("*.png"))}
        if names is None:
            return list(found.values())
        return [found[n] for n in names if n in found]

    def traces(self, contains: str = "") -> list[Path]:
        """Its trace files whose path (under ``traces/``) contains ``contains``."""
        base = self.dir / "traces"
        if not base.is_dir():
            return []
        return sorted(p for p in base.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                      and contains in p.relative_to(base).as_posix())


def lookup(notebook: str, gpu: str | None = None, root: Path | str | None = None) -> tuple[Reference | None, str]:
    """``(Reference or None, a line saying which, or why none)``. Without ``gpu``: ``$PERF_REFERENCE_GPU``, else the
    first ``<gpu>`` folder (by name) that has this notebook's results.json."""
    base = Path(root) if root is not None else reference_root()
    gpu = gpu or os.environ.get(GPU_ENV, "").strip() or None
    if gpu is not None:
        candidates = [base / gpu]
    else:
        candidates = sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    for folder in candidates:
        path = folder / notebook / "results.json"
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict) or not isinstance(doc.get("experiments"), list):
                raise ValueError("not a results document")
        except (OSError, ValueError) as exc:
            return None, f"The reference {path} could not be read ({type(exc).__name__}: {str(exc)[:120]}): none shown."
        ref = Reference(folder.name, path.parent, doc)
        return ref, (f"Reference run beside yours: {ref.source()}, from {path.parent}. Its numbers were measured on "
                     "that machine, not in this run.")
    where = base / (gpu or "<gpu>") / notebook / "results.json"
    return None, (f"No reference run for {notebook}: {where} does not exist (a GPU run's pack unpacked under "
                  f"{base}/<gpu>/ adds one; see the README).")


def find(notebook: str, gpu: str | None = None, root: Path | str | None = None) -> Reference | None:
    """The reference run of ``notebook`` (see ``lookup``), or None."""
    return lookup(notebook, gpu, root)[0]


def note(notebook: str, gpu: str | None = None, root: Path | str | None = None) -> Reference | None:
    """Print where the reference comes from, or that there is none, and return it (or None)."""
    ref, line = lookup(notebook, gpu, root)
    print(line)
    return ref


def add_column(df, ref: Reference | None, metric: str, on: str = "experiment", label: str | None = None):
    """``df`` (a results table with an ``on`` column of experiment names) with a column ``reference (<gpu>): <metric
    in words>`` holding the reference's ``metric`` for the same experiment, placed right after ``metric`` when
    ``df`` has it (else last). Unchanged without a reference."""
    if ref is None or on not in df.columns:
        return df
    out = df.copy()
    col = label or f"{ref.label}: {header(metric)}"
    values = [ref.metric(name, metric) for name in out[on]]
    at = list(out.columns).index(metric) + 1 if metric in out.columns else len(out.columns)
    out.insert(at, col, values)
    return out


def _caption(text: str) -> None:
    from IPython.display import Markdown, display

    display(Markdown(text))


def show_figures(ref: Reference | None, names: Iterable[str] | None = None) -> list[Path]:
    """Show the reference's figures (all, or those named), each under a caption naming the machine. Returns them."""
    if ref is None:
        print("No reference figures: there is no reference run for this notebook.")
        return []
    figs = ref.figures(names)
    if not figs:
        print(f"The reference run {ref.source()} has no figure named {', '.join(names or []) or '(any)'}.")
        return []
    from IPython.display import Image, display

    for path in figs:
        _caption(f"**Reference figure, not this run's:** `{path.name}` from {ref.source()}")
        display(Image(filename=str(path)))
    return figs


def show_trace(ref: Reference | None, contains: str = "", **kw) -> Path | None:
    """Open the reference's first trace whose path contains ``contains`` with ``helpers.traces.show`` (``kw`` go to
    it), under a caption naming the machine. Returns its path."""
    if ref is None:
        print("No reference trace: there is no reference run for this notebook.")
        return None
    found = ref.traces(contains)
    if not found:
        print(f"The reference run {ref.source()} has no trace matching {contains!r}.")
        return None
    from ..traces.show import show

    rel = found[0].relative_to(ref.dir)
    _caption(f"**Reference trace, recorded on {ref.source()}, not in this run:** `{rel}`")
    show(found[0], **kw)
    return found[0]
