"""Thin ipywidgets panels: controls, a Run button, an Output area.

Every experiment is a plain function with defaults; the notebook calls it with the
defaults (so a headless run produces results), and the panel re-runs the *same*
function with the reader's values and appends a row to the results table. Headless
(nbmake, ``make run``) the button never fires: that is why the default call is explicit.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..measure.validate import InvalidValue


def run_panel(
    run: Callable[..., Any],
    controls: Mapping[str, Any],
    *,
    validate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    show: Callable[[Any], Any] | None = None,
    title: str = "Try it yourself",
    button_label: str = "Run",
):
    """Build a panel: ``controls`` (name -> widget), a Run button and an Output.

    On click the values are read, passed through ``validate`` (which returns the
    cleaned values or raises ``InvalidValue``/``ValueError`` with a reader-facing
    message), then ``run(**values)`` is called; ``show(result)`` displays what it
    returned (for example the updated results table). Returns the panel widget; the
    button, the output and a ``click`` helper are attached for tests.
    """
    import ipywidgets as w
    from IPython.display import display

    button = w.Button(description=button_label, button_style="primary", icon="play")
    out = w.Output()
    status = w.HTML(value="")

    def on_click(_=None):
        values = {k: c.value for k, c in controls.items()}
        with out:
            out.clear_output(wait=True)
            try:
                if validate is not None:
                    values = validate(values)
            except (InvalidValue, ValueError) as exc:
                status.value = f"<b style='color:#b00'>Refused:</b> {exc}"
                print(f"Refused: {exc}")
                return None
            status.value = "Running…"
            button.disabled = True
            try:
                result = run(**values)
            except Exception as exc:  # noqa: BLE001 - shown to the reader, not raised
                status.value = f"<b style='color:#b00'>Failed:</b> {type(exc).__name__}: {exc}"
                print(f"Failed: {type(exc).__name__}: {exc}")
                return None
            finally:
                button.disabled = False
            status.value = "Done: a row was added to the results table below."
            if show is not None:
                show(result)
            elif result is not None:
                display(result)
            return result

    button.on_click(on_click)
    header = w.HTML(value=f"<h4>{title}</h4>")
    panel = w.VBox([header, *controls.values(), w.HBox([button, status]), out])
    panel.button = button
    panel.output = out
    panel.status = status
    panel.click = on_click
    return panel
