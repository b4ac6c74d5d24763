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


def test_show_displays_a_readable_table_without_its_index(monkeypatch):
    import pandas as pd

    shown = _captured(monkeypatch)
    df = pd.DataFrame({"step_ms_median": [1.234, None], "workers": [2.0, 4.0], "status": ["failed", "ok"]},
                      index=[7, 9])
    display.show(df)
    html = shown[-1].to_html()
    assert "step median (ms)" in html and "1.23" in html and "–" in html  # units, 2 decimals, missing as '–'
    assert ">7<" not in html and ">9<" not in html  # no index
    data = shown[-1].data
    assert list(data["status"]) == ["ok", "failed"] and str(data["workers"].dtype) == "Int64"
