"""helpers.notebook.display: a helper's source, shown open or collapsed behind a click."""
from helpers.notebook import display


def _captured(monkeypatch):
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    return shown


def test_show_displays_a_readable_table_without_its_index(monkeypatch):
    import pandas as pd

    shown = _captured(monkeypatch)
    df = pd.DataFrame({"step_ms_median": [1.234, None], "workers": [2.0, 4.0], "status": ["failed", "ok"]},
                      index=[7, 9])
    display.show(df)
    html = shown[-1]._repr_html_()
    assert "step median (ms)" in html and "1.23" in html and "–" in html  # units, 2 decimals, missing as '–'
    assert ">7<" not in html and ">9<" not in html  # no index
    data = shown[-1].data
    assert list(data["status"]) == ["ok", "failed"] and str(data["workers"].dtype) == "Int64"


def _cells(html):
    import re

    return re.findall(r"<td[^>]*>(.*?)</td>", html, flags=re.S)


def test_missing_values_one_way_and_shares_as_percentages():
    import numpy as np
    import pandas as pd

    df = pd.DataFrame({"name": ["a", None, pd.NA], "top_op_share": [0.6511, np.nan, None], "x_ms": [1.0, np.nan, 2.5],
                       "n": pd.array([1, None, 3], dtype="Int64")})
    table = display.Table(df)
    cells = _cells(table._repr_html_())
    assert "65.1%" in cells and "0.6511" not in " ".join(cells)
    for bad in ("None", "nan", "NaN", "&lt;NA&gt;", "<NA>", "NaT"):
        assert bad not in cells, cells
    assert cells.count("–") == 6            # every missing value, whatever its spelling
    assert "–" in str(table) and "NaN" not in str(table)   # the plain text (console, tests) too


def test_long_text_wraps_in_its_cell_and_paths_break_at_separators():
    import pandas as pd

    claim = "on a CPU the profiler adds CPU time to every step (interleaved rounds: profiled slower beyond noise)"
    path = "/work/build/test/runs/traces/01_profiler_basics_train_step/chrome_trace.json"
    html = display.Table(pd.DataFrame({"claim": [claim, "short"], "holds": [True, False], "where": [path, "x"]}))\
        ._repr_html_()
    assert "…" not in html and "..." not in html            # nothing cut
    assert claim in html                                      # whole, wrapped at its spaces by the browser
    assert "white-space: normal" in html and "break-all" not in html
    assert f"max-width: {display.TEXT_EM}em" in html          # a long text is boxed, so the table fits
    assert "/<wbr>work/<wbr>build/<wbr>" in html and "chrome_<wbr>trace.<wbr>json" in html  # breaks at '/', '_', '.'
    assert "pro<wbr>filer" not in html and "scale sm" not in display.wrappable("scale smoke").replace("smoke", "")
    assert display.wrappable("short/one") == "short/one"     # a short word keeps no break opportunity


def test_show_drops_empty_columns_and_puts_details_behind_a_click(monkeypatch):
    import pandas as pd

    shown = _captured(monkeypatch)
    df = pd.DataFrame({"experiment": ["a", "b"], "step_ms_mean": [1.0, 2.0], "error": ["", None],
                       "note": [None, None], "device_ms": [0.0, 0.0], "detail": ["x" * 10, "y"]})
    display.show(df)
    assert list(shown[-1].data.columns) == ["experiment", "step mean (ms)", "device (ms)", "detail"]
    shown.clear()
    display.show(df, drop_zero=True, details=["detail"], title="Results")
    assert str(shown[0]) == "Results"
    assert list(shown[1].data.columns) == ["experiment", "step mean (ms)"]
    assert shown[2].data.startswith("<details><summary>1 more column(s): detail")
    assert "experiment" in shown[2].data and "xxxxxxxxxx" in shown[2].data
    assert list(display.informative(pd.DataFrame({"a": [None]})).columns) == ["a"]  # never an empty table


def test_a_readable_frame_shows_itself_as_show_does_with_a_plain_display():
    import pandas as pd

    df = pd.DataFrame({"experiment": ["a", "b", "c"], "step_ms_mean": [1.0, None, 3.0], "note": [None] * 3,
                       "status": ["ok", "failed", "ok"], "error": ["", "boom", ""]})
    out = display.readable(df)
    assert isinstance(out, pd.DataFrame) and list(out.index) == [0, 2, 1]   # still a DataFrame, failed row last
    html = out._repr_html_()
    assert "note" not in html and "–" in html and "NaN" not in html        # the empty column left out
    assert "row_heading" not in html                                        # the default index (reordered) hidden
    assert type(out.sort_index()) is pd.DataFrame                           # what code computes is plain
    ok = display.readable(df[df["status"] == "ok"])._repr_html_()
    assert ">status<" not in ok                                             # all ok: the status column says nothing
    labelled = display.readable(pd.DataFrame({"x_ms": [1.0]}, index=["run 7"]))._repr_html_()
    assert "run 7" in labelled                                              # a meaningful index is kept
    named = display.readable(pd.DataFrame({"x_ms": [1.0, 2.0]}, index=pd.Index([0, 1], name="num_workers")))
    assert "num_workers" in named._repr_html_()                             # a named 0, 1 ... index too


def test_kernel_names_are_shown_short_and_kept_whole_in_the_data():
    """A name column of CUDA kernels' C++ signatures (~250 characters) is shown by its readable part; other text
    columns (row names, sentences) stay whole, and the caller's DataFrame keeps the full names."""
    import pandas as pd

    sig = ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float, "
           "cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, "
           "float*, float*, float const*, float const*, float)")
    df = pd.DataFrame({"name": [sig, "aten::addmm", "x" * 90], "why": ["a sentence " * 8] * 3, "calls": [1, 2, 3]})
    t = display.Table(df)
    assert list(t.data["name"]) == ["cudnn::bn_bw_1C11_kernel_new", "aten::addmm", "x" * 59 + "…"]
    assert t.data["why"][0] == "a sentence " * 8
    assert df["name"][0] == sig
    assert "cudnn::" in t._repr_html_() and "float const*" not in t._repr_html_()
    rows = pd.DataFrame({"name": ["planted input (size 1)", "step bs=256 fp32"]})
    assert list(display.Table(rows).data["name"]) == list(rows["name"])


def test_compiled_graph_names_are_cut_to_a_short_hash_and_long_words_wrap_in_their_cell():
    """Issue 33: 04's operators table showed '## Call CompiledFxGraph fzvz5b6…##' (a 52-character hash, one word)
    running over its `calls` column."""
    import pandas as pd

    name = "## Call CompiledFxGraph fzvz5b6hihniv2d7bq2qbk6ukbhn6yz2cwe4hgh5ryc7mlu2dzvr##"
    df = pd.DataFrame({"name": [name, "aten::mm"], "calls": [3, 45]})
    shown = display.short_names(df)
    assert list(shown["name"]) == ["## Call CompiledFxGraph fzvz5b6h…##", "aten::mm"]
    assert df["name"][0] == name                      # the data keeps the whole name
    html = display.cell("x" * 60)                     # a long word in a boxed cell breaks inside its box
    assert "overflow-wrap: anywhere" in html


def test_printed_lines_wrap_at_spaces_at_100_columns():
    line = "[failed] swin_b bf16 max-autotune: " + "RuntimeError: the compiled graph did not finish " * 3
    out = display.wrapped(line)
    assert all(len(ln) <= display.LINE_WIDTH for ln in out.splitlines()) and len(out.splitlines()) == 2
    assert out.replace("\n    ", " ") == line.rstrip()   # broken only at spaces, no word cut
    assert display.wrapped("short") == "short"
    assert display.wrapped("x" * 150) == "x" * 150         # one word longer than the line is left whole
