"""Thin ipywidgets panels: controls, a Run button, an Output area, re-running a notebook's experiment function with
the reader's values (the notebook calls it once with its defaults, so a headless run has its results)."""

from __future__ import annotations

import html
from typing import Any, Callable, Mapping, Sequence

from ..measure.validate import InvalidValue


def run_panel(
    run: Callable[..., Any],
    controls: Mapping[str, Any],
    *,
    validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    show: Callable[[Any], Any] | None = None,
    title: str = "Try it yourself",
    results: Any = None,
):
    """A panel of ``controls`` (name -> widget), a Run button and an Output. On click the values go through
    ``validate`` (cleaned values, or ``InvalidValue``/``ValueError`` with a reader-facing message) to ``run(**values)``;
    ``show(result)`` displays what it returned. With ``results``, a row the run added as failed makes the status
    "Failed" with its one-line error, never "Done". ``button``, ``output`` and ``click`` are attached for tests."""
    import ipywidgets as w
    from IPython.display import display

    button = w.Button(description="Run", button_style="primary", icon="play")
    out = w.Output()
    status = w.HTML(value="")

    def tell(word: str, text: str) -> None:
        status.value = f"<b style='color:#b00'>{word}:</b> {html.escape(text, quote=False)}"
        print(f"{word}: {text}")

    def on_click(_=None):
        values = {k: c.value for k, c in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                if validate is not None:
                    values = validate(values)
            except (InvalidValue, ValueError) as exc:
                tell("Refused", str(exc))
                return None
            status.value = "Running…"
            button.disabled = True
            before = len(results.experiments) if results is not None else 0
            try:
                result = run(**values)
            except Exception as exc:  # noqa: BLE001 - shown to the reader, not raised
                tell("Failed", f"{type(exc).__name__}: {exc}")
                return None
            finally:
                button.disabled = False
            added = results.experiments[before:] if results is not None else []
            failed = [r for r in added if r.get("status") == "failed"]
            if failed:
                tell("Failed", failed_line(failed))
            else:
                status.value = "Done: a row was added to the results table below."
            if show is not None:
                show(result)
            elif result is not None:
                display(result)
            for row in [] if failed else added:
                shown = same_setting(results.experiments[:before], row)
                if shown is not None:
                    display(shown[0])
                    print(shown[1])
            return result

    button.on_click(on_click)
    for control in controls.values():
        give_labels_room(control)
    header = w.HTML(value=f"<h4>{title}</h4>")
    panel = w.VBox([header, *controls.values(), w.HBox([button, status]), out])
    panel.button, panel.output, panel.status, panel.click = button, out, status, on_click
    return panel


def failed_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line for the failed rows a panel run added: the first row's name and error, and how many more failed."""
    first = rows[0]
    error = " ".join(str(first.get("error") or "no error recorded").split())
    more = f" (and {len(rows) - 1} more failed row(s))" if len(rows) > 1 else ""
    return f"{first.get('name', 'a row')}: {error}{more}"


def give_labels_room(widget: Any) -> None:
    """Let ``widget``'s label (and its children's, for a box) take the width it needs instead of ipywidgets'
    fixed label width, which cuts a long one ("num_work…")."""
    style = getattr(widget, "style", None)
    if style is not None and "description_width" in getattr(style, "keys", ()):
        style.description_width = "initial"
    for child in getattr(widget, "children", ()):
        give_labels_room(child)


# how a reading was taken, not what was measured: rows that differ only in these measured the same setting
METHOD_KEYS = frozenset({"rounds", "timing", "timed_steps", "warmup_steps", "steps", "profiled"})


def _same(config: Mapping[str, Any], earlier: Mapping[str, Any]) -> bool:
    """``earlier`` measured ``config``'s setting: every key of ``config`` (but ``METHOD_KEYS``) has the same value
    there, or is absent there with a default value (False/None) here."""
    keys = [k for k in config if k not in METHOD_KEYS]
    return bool(keys) and all(
        earlier.get(k) == config[k] if k in earlier else config[k] in (False, None) for k in keys
    )


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def reading(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """A results row as one reading of its setting: mean, median, the middle half of its steps (p25-p75), steps,
    rounds and their means, whether it ran under the profiler ("yes"/"no", None: not recorded), its first step
    (left out of the mean)."""
    row = row or {}
    m, c = row.get("metrics") or {}, row.get("config") or {}
    profiled = c.get("profiled", "profiled" in str(row.get("name", "")) or None)
    keys = ("step_ms_mean", "step_ms_median", "step_ms_p25", "step_ms_p75", "steps_timed")
    return {
        "reading": row.get("name"),
        **{k: m.get(k) for k in keys},
        "rounds": m.get("rounds", c.get("rounds")),
        "profiled": {True: "yes", False: "no"}.get(profiled),
        "first_step_ms": m.get("first_step_ms"),
        "round_means_ms": m.get("round_means_ms"),
    }


def _spread(r: Mapping[str, Any]) -> tuple[str, float, float] | None:
    """What a reading's noise is judged by: the range of its round means (two rounds or more), else the middle half
    of its steps; None when it recorded neither."""
    rounds = [x for x in (r.get("round_means_ms") or []) if _num(x)]
    if len(rounds) >= 2:
        return "round means", min(rounds), max(rounds)
    lo, hi = r.get("step_ms_p25"), r.get("step_ms_p75")
    return ("middle half of steps", lo, hi) if _num(lo) and _num(hi) else None


def why_they_differ(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """One line, from the numbers of two readings (``reading``) of one setting: the ratio of their means and what
    sets them apart: the profiler, interleaved rounds against one run, a single cold step, a tail of long steps, the
    spread of each. "Within noise" only when each mean lies inside the other's spread (``_spread``)."""
    a, b = old.get("step_ms_mean"), new.get("step_ms_mean")
    na, nb = old.get("reading"), new.get("reading")
    if not (_num(a) and _num(b) and a > 0 and b > 0):
        return f"{na} or {nb} has no mean step (failed or skipped): nothing to set side by side."
    head = f"{nb} reads {b / a:.2f}x {na} ({b:.1f} against {a:.1f} ms)"
    sa, sb = _spread(old), _spread(new)
    if sa and sb and sa[1] <= b <= sa[2] and sb[1] <= a <= sb[2]:
        return f"{head}; each mean lies within the other's spread ({sa[0]}): one setting, within noise."
    facts = []
    if {old.get("profiled"), new.get("profiled")} == {"yes", "no"}:
        facts.append(f"{nb if new['profiled'] == 'yes' else na} ran under the profiler")
    if None not in (old.get("rounds"), new.get("rounds")) and old["rounds"] != new["rounds"]:
        facts.append(f"{na} pooled {old['rounds']} interleaved round(s), {nb} {new['rounds']}")
    for r in (old, new):
        if r.get("steps_timed") == 1:
            facts.append(f"{r['reading']} is one step, a cold one")
        if _num(r.get("step_ms_median")) and r["step_ms_mean"] > 1.3 * r["step_ms_median"]:
            facts.append(
                f"{r['reading']}'s mean is pulled up by a tail of long steps "
                f"(median {r['step_ms_median']:.1f} ms)"
            )
    if sa and sb:
        busier = f", busier during {nb}" if (sb[2] - sb[1]) / b > 2 * (sa[2] - sa[1]) / a else ""
        kind = sa[0] if sa[0] == sb[0] else f"{sa[0]}; {sb[0]}"
        facts.append(
            f"spread ({kind}): {sa[1]:.1f}-{sa[2]:.1f} against {sb[1]:.1f}-{sb[2]:.1f} ms, neither holding "
            f"the other's mean: the machine ran the step at another speed{busier}"
        )
    if not facts:
        facts = ["no spread was recorded to tell noise from a change"]
    return f"{head}; {'; '.join(facts)}."


def same_setting(earlier_rows: Sequence[Mapping[str, Any]], row: Mapping[str, Any], last: int = 3):
    """When a panel's ``row`` re-measures a setting an ``earlier_rows`` row measured: ``(table, line)``, the
    readings side by side (the ``last`` earlier ones, then the panel's) and ``why_they_differ`` against the latest
    earlier one; None when nothing earlier measured it (or a mean is missing)."""
    import pandas as pd

    from .display import Table

    if row.get("status") != "ok" or not _num((row.get("metrics") or {}).get("step_ms_mean")):
        return None
    old = [
        r
        for r in earlier_rows
        if r.get("status") == "ok"
        and _num((r.get("metrics") or {}).get("step_ms_mean"))
        and _same(row.get("config") or {}, r.get("config") or {})
    ][-last:]
    if not old:
        return None
    readings = [reading(r) for r in old] + [
        reading(row) | {"reading": f"this panel ({row.get('name')})"}
    ]
    table = Table(pd.DataFrame(readings).drop(columns="round_means_ms").dropna(axis=1, how="all"))
    return table, "Same setting, measured earlier too: " + why_they_differ(
        readings[-2], readings[-1]
    )
