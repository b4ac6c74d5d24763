"""helpers.notebook.display: a helper's source, shown open or collapsed behind a click."""
from helpers.notebook import display


def _captured(monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    return shown


def test_show_source_open_and_collapsed(monkeypatch):
    shown = _captured(monkeypatch)
    display.show_source(display.header)
    assert "def header" in shown[-1].data
    display.show_source(display.header, display.readable, collapsed=True)
    html = shown[-1].data
    assert html.startswith("<details><summary>Source of <code>header, readable</code>") and "<pre" in html
    assert html.endswith("</details>") and "readable" in html.split("</summary>", 1)[1]
