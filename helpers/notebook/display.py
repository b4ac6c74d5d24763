"""Showing results to a person: readable tables (units in headers, integers as integers, failed rows last), shown
(``show``)."""

from __future__ import annotations

import functools
import html
import numbers
import re
import textwrap

_UNITS = (("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_mb", "MB"), ("_gb", "GB"), ("_pct", "%"))
_STATS = ("median", "mean", "p25", "p75", "min", "max", "std", "sum")
LINE_WIDTH = 100  # columns: a longer printed line wraps in JupyterLab's stream output wherever the width ends


def header(col: str) -> str:
    """A column name with its unit in words: ``step_ms_median`` -> ``step median (ms)``,
    ``peak_mem_mb`` -> ``peak mem (MB)``, ``samples_per_s`` -> ``samples/s``. Unknown names only lose '_'."""
    stat = next((s for s in _STATS if col.endswith("_" + s)), "")
    name = col[: -len(stat) - 1] if stat else col
    if name.endswith("_per_s"):
        return name.removesuffix("_per_s").replace("_", " ") + "/s" + (f" {stat}" if stat else "")
    for suffix, unit in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            base = name[: -len(suffix)].replace("_", " ")
            return f"{base}{' ' + stat if stat else ''} ({unit})"
    return col.replace("_", " ")


def readable(df):
    """A copy of a results DataFrame for a person: integer-valued columns as integers, units in the headers
    (``header``), failed rows last, an all-empty ``error`` column dropped."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        s = out[col]
        if not pd.api.types.is_float_dtype(s):
            continue
        vals = s.dropna()
        if len(vals) and (vals == vals.round()).all() and vals.abs().max() < 2**53:
            out[col] = s.astype("Int64")
    if "error" in out.columns and not out["error"].fillna("").astype(str).str.strip().any():
        out = out.drop(columns="error")
    if "status" in out.columns:
        out = pd.concat([out[out["status"] != "failed"], out[out["status"] == "failed"]])
    return _frame()(out.rename(columns={c: header(c) for c in out.columns if isinstance(c, str)}))


@functools.cache
def _frame():
    """The ``Frame`` class (made on first use: pandas is imported lazily)."""
    import pandas as pd

    class Frame(pd.DataFrame):
        """A DataFrame for a person (``readable``, ``Results.checks_table``) that a plain ``display(...)`` shows as
        ``show`` does; what is computed from it is a plain DataFrame. The default index 0, 1, 2 ... is hidden."""

        @property
        def _constructor(self):
            return pd.DataFrame

        def _repr_html_(self):
            plain = (
                self.index.name is None
                and pd.api.types.is_integer_dtype(self.index)
                and sorted(self.index) == list(range(len(self)))
            )
            try:
                return Table(informative(pd.DataFrame(self)), hide_index=plain)._repr_html_()
            except Exception:  # noqa: BLE001 - a table pandas' Styler cannot take is still shown, as pandas does
                return pd.DataFrame(self)._repr_html_()

    return Frame


def frame(df):
    """``df`` as a ``Frame``: a DataFrame that a plain ``display(...)`` shows as ``show`` does (see ``readable``)."""
    return _frame()(df)


# A shown table's long text wraps inside its cell, at most TEXT_EM wide: a table of a few numbers and a sentence
# fits an output area of 1000 px
TEXT_EM = 28
LONG_TEXT = 40  # characters: a text longer than this is boxed to TEXT_EM and left-aligned
_CELL_PROPS = (
    "white-space: normal; overflow-wrap: normal; word-break: normal; padding: 0.4em 0.35em;"
)
_CELL_CSS = [{"selector": "td, th", "props": _CELL_PROPS}]
_BREAK_AFTER = ("/", ".", "_", "\\", "::", ",")


def missing(v) -> bool:
    """True for every spelling of a missing value (None, NaN, pandas' NA and NaT): all shown as '–'."""
    import pandas as pd

    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):  # a list or an array: not a missing scalar
        return False


def wrappable(text) -> str:
    """``text`` HTML-escaped, with a break opportunity (``<wbr>``) after each '/', '.', '_', '::' and ',' of a word
    longer than 20 characters: a path or an operator name wraps at its separators, not in the middle of a word,
    and not at all when it fits. Missing values are '–'."""
    if missing(text):
        return "–"

    def one(word: str) -> str:
        out = html.escape(word)
        if len(word) > 20:
            for sep in _BREAK_AFTER:
                out = out.replace(html.escape(sep), html.escape(sep) + "<wbr>")
        return out

    return "".join(tok if tok.isspace() else one(tok) for tok in re.split(r"(\s+)", str(text)))


def informative(df, drop_zero: bool = False):
    """``df`` without the columns that carry nothing: all missing or empty text, a ``status`` "ok" on every row, and
    with ``drop_zero`` all 0 (a device column on a CPU-only run); unchanged when every column would go."""
    import pandas as pd

    def says_nothing(col) -> bool:
        s = df[col]
        return bool(
            (col == "status" and len(s) and (s == "ok").all())  # every row ran: nothing more to say
            or s.map(lambda v: missing(v) or (isinstance(v, str) and not v.strip())).all()
            or (
                drop_zero
                and pd.api.types.is_numeric_dtype(s)
                and not pd.api.types.is_bool_dtype(s)
                and (s.fillna(0) == 0).all()
            )
        )

    keep = [c for c in df.columns if not says_nothing(c)]
    return df[keep] if keep else df


class Table:
    """A table shown as a person reads it: ``styled`` in a notebook (HTML), its ``readable`` text on a console or in
    a test's captured output (``str``). ``styler`` is the pandas Styler."""

    def __init__(self, df, precision: int = 2, hide_index: bool = True, **fmt):
        self.styler = styled(df, precision, hide_index=hide_index, **fmt)
        self.data = self.styler.data

    def _repr_html_(self) -> str:
        return self.styler.to_html()

    def __str__(self) -> str:
        import pandas as pd

        return pd.DataFrame(self.data).to_string(index=False, na_rep="–")

    __repr__ = __str__


class Text:
    """A line (or a few) of prose shown in a notebook as HTML, so a long path wraps after its '/' rather than
    inside a word as a printed stream does; ``str`` is the plain text (consoles, tests). ``**bold**`` spans are
    bold. Missing values say '–'."""

    def __init__(self, text: str, small: bool = False):
        self.text, self.small = str(text), small

    def _repr_html_(self) -> str:
        body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", wrappable(self.text)).replace("\n", "<br>")
        size = "font-size: 0.95em; " if self.small else ""
        return f'<div style="{size}margin: 0.2em 0; max-width: 60em">{body}</div>'

    def __str__(self) -> str:
        return self.text.replace("**", "")

    __repr__ = __str__


def wrapped(text) -> str:
    """``text`` for ``print``: each line longer than ``LINE_WIDTH`` wrapped at spaces (``textwrap``, never inside a
    word), its continuation lines indented."""
    fill = textwrap.TextWrapper(
        LINE_WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False
    ).fill
    return "\n".join(
        fill(line) if len(line) > LINE_WIDTH else line for line in str(text).splitlines()
    )


def say(text: str, small: bool = False) -> None:
    """Display ``text`` (``Text``): wrapped at spaces and path separators in a notebook, printed elsewhere."""
    from IPython.display import display

    display(Text(text, small))


def show(
    df,
    precision: int = 2,
    *,
    drop_zero: bool = False,
    details=None,
    title: str | None = None,
    **fmt,
) -> None:
    """Display a results DataFrame for a person (``styled``), without the columns that carry nothing (``informative``;
    ``drop_zero``: all-0 ones too). ``details`` (column names) go to a second table behind a click, with the first
    column again, so a wide table fits; ``title`` is said above it. ``fmt`` goes to ``Styler.format``."""
    from IPython.display import HTML, display

    df = informative(df, drop_zero=drop_zero)
    detail_cols = [c for c in (details or []) if c in df.columns]
    main = df.drop(columns=detail_cols) if detail_cols else df
    if title:
        display(Text(f"**{title}**"))
    display(Table(main, precision, **fmt))
    if detail_cols:
        first = [c for c in df.columns[:1] if c not in detail_cols]
        body = Table(df[first + detail_cols], precision, **fmt)._repr_html_()
        names = ", ".join(header(c) if isinstance(c, str) else str(c) for c in detail_cols)
        display(
            HTML(
                f"<details><summary>{len(detail_cols)} more column(s): {html.escape(names)} (click to show)"
                f"</summary>{body}</details>"
            )
        )


def cell(v, precision: int = 2) -> str:
    """One cell of a shown table as HTML: '–' when missing, a number at ``precision`` decimals, text escaped with
    break opportunities (``wrappable``); a text longer than ``LONG_TEXT`` characters in a left-aligned box at most
    ``TEXT_EM`` wide, so its column does not push the table past the output area."""
    if missing(v):
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        return f"{float(v):.{precision}f}"
    text = wrappable(v)
    if len(str(v)) > LONG_TEXT:  # overflow-wrap: a word wider than the box breaks
        box = f"max-width: {TEXT_EM}em; min-width: 10em; text-align: left; overflow-wrap: anywhere"
        return f'<div style="{box}">{text}</div>'
    return text


# Columns of operator and kernel names (these, or ending ``_kernel``/``_op``/``_kernel_name``), shown short (a
# kernel's C++ signature runs to ~250 characters); the data keeps the full names
NAME_COLUMNS = ("name", "kernel", "op", "operator", "top_op", "top_kernel")
NAME_WIDTH = 60


# TorchInductor names a compiled graph by a 52-character hash, one word that cannot wrap: 8 characters tell them apart
_GRAPH_HASH = re.compile(r"(CompiledFxGraph \w{8})\w{9,}…?")


def short_names(df, width: int = NAME_WIDTH):
    """``df`` with each name column as a table shows it: a compiled graph's hash cut to 8 characters, a name longer
    than ``width`` or a C++ signature cut to its readable part (``perf_doctor.kernels.short_name``)."""
    from perf_doctor.kernels import looks_like_signature, short_name

    def one(v):
        if not isinstance(v, str):
            return v
        v = _GRAPH_HASH.sub(r"\1…", v)
        return short_name(v, width) if len(v) > width or looks_like_signature(v) else v

    names = [
        c
        for c in df.columns
        if isinstance(c, str)
        and (c in NAME_COLUMNS or c.endswith(("_kernel", "_op", "_kernel_name")))
    ]
    return df.assign(**{c: df[c].map(one) for c in names}) if names else df


def styled(df, precision: int = 2, hide_index: bool = True, **fmt):
    """What ``show`` displays: the pandas ``Styler`` of ``readable(df)``, names short (``short_names``), text wrapped
    in its cell (``cell``) and left-aligned, ``share`` columns as percentages, missing values as '–'."""
    import pandas as pd

    hide_index = hide_index or not df.index.is_unique  # a Styler needs a unique index
    data = short_names(df.reset_index(drop=True) if hide_index else pd.DataFrame(df))
    # columns holding a fraction of a whole (``share``, ``top_op_share``, ``backward_share``): shown as a %
    shares = [
        header(c)
        for c in data.columns
        if isinstance(c, str) and (c == "share" or c.endswith("_share"))
    ]
    out = readable(data)
    text = [c for c in out.columns if not pd.api.types.is_numeric_dtype(out[c]) and c not in shares]
    formats = {c: (lambda v: cell(v, precision)) for c in text}
    formats.update({c: (lambda v: "–" if missing(v) else f"{float(v):.1%}") for c in shares})
    formats.update(fmt.pop("formatter", None) or {})
    st = out.style.hide(axis="index") if hide_index else out.style
    st = st.format(formats, precision=precision, na_rep="–", **fmt)
    st = st.set_table_styles(_CELL_CSS, overwrite=False)
    left = [{"selector": "th, td", "props": "text-align: left;"}]
    return (
        st.set_table_styles({c: left for c in text}, overwrite=False)
        if text and out.columns.is_unique
        else st
    )


# The trace toolkit's views in a notebook (``perf_doctor.show``) render their tables and lines as these do: the
# toolkit imports nothing from this layer, this layer hands it its renderers.
from perf_doctor.show import render_with  # noqa: E402 - after Table and say, which it is given

render_with(Table, say)
