"""Showing results to a person: readable tables (units in headers, integers as integers, failed rows last), shown
(``show``), and a helper's source code, highlighted."""
from __future__ import annotations

_UNITS = (("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_mb", "MB"), ("_gb", "GB"), ("_pct", "%"))
_STATS = ("median", "mean", "p25", "p75", "min", "max", "std")


def header(col: str) -> str:
    """A column name with its unit in words: ``step_ms_median`` -> ``step median (ms)``,
    ``peak_mem_mb`` -> ``peak mem (MB)``, ``samples_per_s`` -> ``samples/s``. Unknown names only lose '_'."""
    name, stat = col, ""
    for s in _STATS:
        if name.endswith("_" + s):
            name, stat = name[: -len(s) - 1], s
            break
    if name.endswith("_per_s"):
        base = name[: -len("_per_s")].replace("_", " ")
        return f"{base}/s" + (f" {stat}" if stat else "")
    for suffix, unit in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            base = name[: -len(suffix)].replace("_", " ")
            return f"{base}{' ' + stat if stat else ''} ({unit})"
    return col.replace("_", " ")


def readable(df):
    """A results DataFrame made for a person: integer-valued columns as integers (``num_workers`` shows 4,
    not 4.0), units in the headers (``header``), failed rows after the others, an all-empty ``error``
    column dropped. The input is left as it is; code keeps using its column names."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        s = out[col]
        if pd.api.types.is_bool_dtype(s) or not pd.api.types.is_numeric_dtype(s):
            continue
        vals = s.dropna()
        if len(vals) and pd.api.types.is_float_dtype(s) and (vals == vals.round()).all() and vals.abs().max() < 2**53:
            out[col] = s.astype("Int64")
    if "error" in out.columns and not out["error"].fillna("").astype(str).str.strip().any():
        out = out.drop(columns="error")
    if "status" in out.columns:
        out = pd.concat([out[out["status"] != "failed"], out[out["status"] == "failed"]])
    return out.rename(columns={c: header(c) for c in out.columns if isinstance(c, str)})


def show_source(*objs, collapsed: bool = False, title: str | None = None) -> None:
    """Display the source code of ``objs``, highlighted: a helper the lesson wants the reader to see, shown from the
    package rather than redefined in the notebook. ``collapsed=True`` puts a long listing behind a click (an HTML
    ``<details>`` element whose summary names it and counts its lines), so it does not stand in the lesson's way."""
    import html
    import inspect

    from IPython.display import HTML, Code, display

    src = "\n".join(inspect.getsource(o) for o in objs)
    if not collapsed:
        display(Code(src, language="python"))
        return
    names = title or ", ".join(getattr(o, "__qualname__", type(o).__name__) for o in objs)
    body = Code(src, language="python")._repr_html_()
    display(HTML(f"<details><summary>Source of <code>{html.escape(names)}</code> ({len(src.splitlines())} lines; "
                 f"click to show)</summary>{body}</details>"))


def show(df, precision: int = 2, **fmt) -> None:
    """Display a results DataFrame for a person: ``readable`` (units in headers, integers as integers, failed rows
    last), without the index, floats at ``precision`` decimals and missing values as '–'. ``fmt`` goes to pandas'
    ``Styler.format``."""
    from IPython.display import display

    display(styled(df, precision, **fmt))


def styled(df, precision: int = 2, **fmt):
    """What ``show`` displays: the pandas ``Styler`` of ``readable(df)``."""
    return readable(df.reset_index(drop=True)).style.hide(axis="index").format(precision=precision, na_rep="–", **fmt)
