"""A reference GPU's numbers beside the reader's, never instead of them: a GPU run's pack unpacked under
``data/reference/<gpu>/<notebook>/`` (``$PERF_REFERENCE_DIR`` moves the root, ``$PERF_REFERENCE_GPU`` picks a
``<gpu>``; docs/gpu.md). Every function takes None for "no reference" and adds nothing; a value not measured there
reads ``NOT_RUN``, never NaN."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..project import folder
from .display import header

ROOT_ENV = "PERF_REFERENCE_DIR"
GPU_ENV = "PERF_REFERENCE_GPU"
TRACE_SUFFIXES = (".json", ".json.gz")
NOT_RUN = "not run in the reference run"
NOT_MEASURED = "not measured in this run"


def reference_root() -> Path:
    """``$PERF_REFERENCE_DIR`` or the project's ``data/reference``."""
    return folder(ROOT_ENV, "data", "reference")


@dataclass
class Reference:
    """One notebook's reference run: ``gpu`` (its folder name), ``dir`` and ``doc`` (its results.json)."""

    gpu: str
    dir: Path
    doc: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        return f"reference ({self.gpu})"

    def source(self) -> str:
        """Where the numbers come from: the GPU's name, torch, scale and whether the run was cut short."""
        env = self.doc.get("env", {})
        bits = [
            env.get("device_name") or env.get("device") or "unknown device",
            f"torch {env.get('torch', '?')}",
            f"{self.doc.get('scale') or '?'} scale",
        ]
        if self.doc.get("interrupted"):
            bits.append("interrupted: some experiments missing")
        return f"{self.gpu} ({', '.join(bits)})"

    def comparison(self, a: str, b: str) -> dict[str, Any] | None:
        """The reference's comparison of rows ``a`` and ``b`` (ratio a/b, low, high, verdict), or None. Recorded the
        other way round (b against a), it is returned turned: the ratio and its interval inverted, a and b swapped."""
        for c in self.doc.get("comparisons", []):
            if (c.get("a"), c.get("b")) == (a, b):
                return c
        for c in self.doc.get("comparisons", []):
            if (c.get("a"), c.get("b")) == (b, a) and c.get("ratio"):
                turned = dict(c, a=a, b=b, ratio=1 / c["ratio"])
                if c.get("low") and c.get("high"):
                    turned["low"], turned["high"] = 1 / c["high"], 1 / c["low"]
                return turned
        return None

    def row(self, name: str) -> dict[str, Any] | None:
        return next(
            (e for e in reversed(self.doc.get("experiments", [])) if e.get("name") == name), None
        )

    def metric(self, name: str, key: str) -> Any:
        """The reference's value of ``key`` for the experiment ``name`` (None when absent or failed there)."""
        row = self.row(name)
        return None if row is None or row.get("status") != "ok" else row.get("metrics", {}).get(key)

    def traces(self, contains: str = "") -> list[Path]:
        """Its trace files whose path (under ``traces/``) contains ``contains``."""
        base = self.dir / "traces"
        if not base.is_dir():
            return []
        return sorted(
            p
            for p in base.rglob("*")
            if p.is_file()
            and p.name.endswith(TRACE_SUFFIXES)
            and contains in p.relative_to(base).as_posix()
        )


def shown(path: Path) -> str:
    """A reference's folder as a reader sees it: relative to the project (no checkout's or temporary path)."""
    from .env import project_root

    try:
        return str(Path(path).resolve().relative_to(project_root().resolve()))
    except (OSError, ValueError):
        return Path(path).name


def lookup(
    notebook: str, gpu: str | None = None, root: Path | str | None = None
) -> tuple[Reference | None, str]:
    """``(Reference or None, a line saying which, or why none)``. Without ``gpu``: ``$PERF_REFERENCE_GPU``, else the
    first ``<gpu>`` folder (by name) that has this notebook's results.json."""
    base = Path(root) if root is not None else reference_root()
    gpu = gpu or os.environ.get(GPU_ENV, "").strip() or None
    if gpu:
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
            return (
                None,
                f"The reference {shown(path)} could not be read ({type(exc).__name__}: {str(exc)[:120]}): none shown.",
            )
        ref = Reference(folder.name, path.parent, doc)
        about = {}
        with contextlib.suppress(OSError, ValueError):
            about = json.loads((folder / "about.json").read_text())
        commit = about.get("commit") if isinstance(about, dict) else None
        # the commit names the code that ran; how it was made (about.json's "made") stays in data and docs
        return ref, (
            f"Reference run beside yours: {ref.source()}, from {shown(path.parent)}"
            + (f" (commit {commit})" if commit else "")
            + ". Its numbers were measured on that machine, not in this run."
        )
    where = base / (gpu or "<gpu>") / notebook / "results.json"
    return None, (
        f"No reference run for {notebook}: {shown(where)} does not exist (a GPU run's pack unpacked under "
        f"{shown(base)}/<gpu>/ adds one; see docs/gpu.md)."
    )


def note(notebook: str, gpu: str | None = None, root: Path | str | None = None) -> Reference | None:
    """Print where the reference comes from, or that there is none, and return it (or None)."""
    ref, line = lookup(notebook, gpu, root)
    print(line)
    return ref


def add_column(df, ref: Reference | None, metric: str, on: str = "experiment"):
    """``df`` (an ``on`` column of experiment names) with a column ``reference (<gpu>): <metric in words>``, the
    reference's ``metric`` of each experiment, right after ``metric`` (else last). Unchanged without a reference."""
    if ref is None or on not in df.columns:
        return df
    out = df.copy()
    col = f"{ref.label}: {header(metric)}"
    values = [ref.metric(name, metric) for name in out[on]]  # JSON: only NaN is not equal to itself
    at = list(out.columns).index(metric) + 1 if metric in out.columns else len(out.columns)
    out.insert(at, col, [NOT_RUN if v is None or v != v else v for v in values])
    return out


def _has_ratio(entry: dict[str, Any] | None) -> bool:
    ratio = (entry or {}).get("ratio")
    return isinstance(ratio, (int, float)) and ratio == ratio


def ratio_text(entry: dict[str, Any] | None, missing: str = NOT_RUN) -> str:
    """A comparison in the one ratio convention, b's time as a multiple of a's: ``0.51× the time [0.49, 0.53]:
    faster`` (its ratio is a/b; the 95% interval, the verdict); an entry that names what its ratio ``of`` is (b/a,
    e.g. ``memory``) as ``0.89× the memory (...)``; ``missing`` when there is none or it has no ratio."""
    if not _has_ratio(entry):
        return missing
    lo, hi = entry.get("low"), entry.get("high")
    if entry.get("of"):
        return f"{entry['ratio']:.2f}× the {entry['of']} {entry.get('verdict', '')}".rstrip()
    text = f"{1 / entry['ratio']:.2f}× the time"
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        text += f" [{1 / hi:.2f}, {1 / lo:.2f}]"
    return text + (f": {entry['verdict']}" if entry.get("verdict") else "")


def agreement(
    article_ratio: float | None,
    entry: dict[str, Any] | None,
    missing: str = NOT_RUN,
) -> str:
    """Whether ``entry`` (ratio a/b, ``low``/``high``) reproduces the article's ratio: "yes" (interval on its side of 1,
    within 25%), "yes, larger"/"yes, smaller", "no, reversed", "not resolved", "no (article: no effect)"
    (``article_ratio`` 1.0), ``missing`` without one."""
    if not _has_ratio(entry):
        return missing
    if article_ratio is None:
        return "no article figure"
    lo, hi = entry.get("low", entry["ratio"]), entry.get("high", entry["ratio"])
    resolved = lo > 1 or hi < 1
    if article_ratio == 1:
        return "yes (no effect either)" if not resolved else "no (article: no effect)"
    if not resolved:
        return "not resolved"
    if (lo > 1) != (article_ratio > 1):
        return "no, reversed"
    import math

    effect, art = abs(math.log(entry["ratio"])), abs(math.log(article_ratio))
    if effect > art * 1.25 and min(abs(math.log(lo)), abs(math.log(hi))) > art:
        return "yes, larger"
    if effect < art * 0.75 and max(abs(math.log(lo)), abs(math.log(hi))) < art:
        return "yes, smaller"
    return "yes"


ARTICLE_COLUMNS = [
    "effect",
    "article",
    "H100 reference",
    "H100 reproduces?",
    "this run",
    "this run reproduces?",
    "why",
]


def article_table(rows: Iterable[dict[str, Any]]):
    """The articles' figures beside the reference's and this run's, a row per effect (``effect``, ``article``,
    ``article_ratio``, ``reference``, ``this_run``, ``why``). A side is a comparison (Reproduces? is ``agreement``),
    None, a ``(text, reproduces?)`` pair (text None: not run) or a text (Reproduces? is the row's ``agrees``)."""
    import pandas as pd

    out = []
    for r in rows:

        def side(v, missing):
            if isinstance(v, tuple):
                return v if v[0] else (missing, missing)
            if isinstance(v, dict) or v is None:
                return ratio_text(v, missing), agreement(r.get("article_ratio"), v, missing)
            return str(v), r.get("agrees", "–")

        ref, ref_ok = side(r.get("reference"), NOT_RUN)
        mine, mine_ok = side(r.get("this_run"), NOT_MEASURED)
        plain = ref_ok.startswith("yes") and mine_ok.startswith("yes")
        out.append(
            {
                "effect": r["effect"],
                "article": r.get("article", "–"),
                "H100 reference": ref,
                "H100 reproduces?": ref_ok,
                "this run": mine,
                "this run reproduces?": mine_ok,
                "why": "" if plain else r.get("why", ""),
            }
        )
    return pd.DataFrame(out, columns=ARTICLE_COLUMNS)


def show_figures(ref: Reference | None, names: Iterable[str] | None = None) -> list[Path]:
    """Show the reference's figures (all, or those named), each under a caption naming the machine. Returns them."""
    if ref is None:
        print("No reference figures: there is no reference run for this notebook.")
        return []
    found = {p.stem: p for p in sorted(ref.dir.glob("*.png"))}
    figs = list(found.values()) if names is None else [found[n] for n in names if n in found]
    if not figs:
        print(
            f"The reference run {ref.source()} has no figure named {', '.join(names or []) or '(any)'}."
        )
        return []
    from IPython.display import Image, Markdown, display

    for path in figs:
        display(
            Markdown(f"**Reference figure, not this run's:** `{path.name}` from {ref.source()}")
        )
        display(Image(filename=str(path)))
    return figs


def show_trace(ref: Reference | None, contains: str = "", **kw) -> Path | None:
    """Open the reference's first trace whose path contains ``contains`` with ``perf_doctor.show`` (``kw`` go to
    it), under a caption naming the machine. Returns its path."""
    if ref is None:
        print("No reference trace: there is no reference run for this notebook.")
        return None
    found = ref.traces(contains)
    if not found:
        print(f"The reference run {ref.source()} has no trace matching {contains!r}.")
        return None
    from IPython.display import Markdown, display

    from perf_doctor.show import show

    rel = found[0].relative_to(ref.dir)
    display(Markdown(f"**Reference trace, recorded on {ref.source()}, not in this run:** `{rel}`"))
    show(found[0], **kw)
    return found[0]
