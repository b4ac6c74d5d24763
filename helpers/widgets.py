"""Thin ipywidgets panels: controls, a Run button, an Output area.

Every experiment is a plain function with defaults; the notebook calls it with the
defaults (so a headless run produces results), and the panel re-runs the *same*
function with the reader's values and appends a row to the results table. Headless
(nbmake, ``make run``) the button never fires: that is why the default call is explicit.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from .env import is_cuda

COMPILE_MODES = ("eager", "default", "reduce-overhead", "max-autotune")
PRECISIONS = ("fp32", "bf16", "fp16")


class InvalidValue(ValueError):
    """A control value that the panel refuses (the message is shown to the reader)."""


def validate_num_workers(n: Any, max_workers: int | None = None) -> int:
    cores = max_workers if max_workers is not None else (os.cpu_count() or 1)
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidValue(f"num_workers must be a whole number, not {n!r}.")
    if n < 0:
        raise InvalidValue(f"num_workers cannot be negative (got {n}); use 0 to load in the main process.")
    if n > cores:
        raise InvalidValue(f"num_workers={n} is more than this machine's {cores} CPU cores; choose 0..{cores}.")
    return n


def validate_batch_size(b: Any, maximum: int = 4096) -> int:
    if isinstance(b, bool) or not isinstance(b, int):
        raise InvalidValue(f"batch size must be a whole number, not {b!r}.")
    if b < 1:
        raise InvalidValue(f"batch size must be at least 1 (got {b}).")
    if b > maximum:
        raise InvalidValue(f"batch size {b} is above this panel's limit of {maximum}.")
    return b


def validate_choice(value: Any, choices, what: str) -> Any:
    if value not in choices:
        raise InvalidValue(f"unknown {what} {value!r}; choose one of: {', '.join(map(str, choices))}.")
    return value


def validate_compile_mode(mode: Any, device=None) -> str:
    validate_choice(mode, COMPILE_MODES, "compile mode")
    if mode == "reduce-overhead" and not is_cuda(device):
        raise InvalidValue("compile mode 'reduce-overhead' uses CUDA graphs and needs a GPU; this run is on the CPU.")
    return mode


def validate_precision(p: Any, device=None) -> str:
    validate_choice(p, PRECISIONS, "precision")
    if p == "fp16" and not is_cuda(device):
        raise InvalidValue("fp16 autocast is meant for GPUs; on the CPU choose fp32 or bf16.")
    return p


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
