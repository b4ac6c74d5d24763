"""Notebook 01's ``key_averages()`` tables, shown so that they do not wrap, and the three orders of one table.

A ``key_averages().table()`` is a fixed-width text table: a name column and 14 characters per column. With the CPU's
six columns and names cut at ``NAME_WIDTH`` it fits the ``WIDTH`` characters a JupyterLab output area shows on one line;
a GPU's four device columns, the memory columns or the input shapes do not fit at any name width, so those rows are
shown as a DataFrame instead (``averages_frame``), with the columns that table is about."""
from __future__ import annotations

from typing import Any, Mapping

from ...measure import profiling
from ...notebook.display import show
from ...traces import events as trace_events
from .readings import is_label

WIDTH = 120       # characters of one line in a JupyterLab output area at 1400 px with the file browser open (~124)
NAME_WIDTH = 36   # ``max_name_column_width`` that keeps a CPU table (name + 6 columns of 14) within WIDTH


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def fits(text: str, width: int = WIDTH) -> bool:
    """Whether every line of a text table fits ``width`` characters (trailing spaces do not count: they never wrap)."""
    return max((len(line.rstrip()) for line in text.splitlines()), default=0) <= width


def _device(attr: str) -> str:
    return attr.replace("cuda", "device")   # as ``table(sort_by=...)`` reads its key


def _on_device(e) -> bool:
    return not trace_events.is_host(e)


def averages_frame(avgs, sort_by: str, row_limit: int = 10, columns: str = "time", on_gpu: bool = False):
    """The rows ``avgs.table(sort_by=..., row_limit=...)`` would print (``avgs``: a ``key_averages()`` list), as a
    DataFrame with the columns of that table's subject: ``"time"`` (calls, self share, self / total / per-call CPU
    time; on a GPU the CPU's self and total time and the device's four), ``"memory"`` (calls, self time, memory used
    with and without children, MB) or ``"shapes"`` (input shapes, calls, self and total time). Times in ms; shares
    are fractions of the column's total, as the table's ``%`` columns."""
    import pandas as pd

    rows = sorted(avgs, key=lambda e: getattr(e, _device(sort_by)), reverse=True)[:row_limit]
    cpu_all = sum(e.self_cpu_time_total for e in avgs) or 1.0
    dev_all = sum(e.self_device_time_total for e in avgs   # the kernels' rows (the "Self CUDA %" denominator)
                  if _on_device(e) and not getattr(e, "is_user_annotation", False)) or 1.0
    t = "device" if on_gpu else "cpu"
    out = []
    for e in rows:
        r: dict[str, Any] = {"name": e.key}
        if columns == "shapes":
            r["input_shapes"] = str(e.input_shapes)
        r["calls"] = e.count
        if columns == "time":
            if on_gpu:
                r |= {"self_cpu_ms": e.self_cpu_time_total / 1e3, "cpu_total_ms": e.cpu_time_total / 1e3,
                      "self_device_share": e.self_device_time_total / dev_all}
            else:
                r["self_cpu_share"] = e.self_cpu_time_total / cpu_all
        r[f"self_{t}_ms"] = getattr(e, f"self_{t}_time_total") / 1e3
        if columns != "memory":
            r[f"{t}_total_ms"] = getattr(e, f"{t}_time_total") / 1e3
        if columns == "time":
            r[f"{t}_avg_ms"] = getattr(e, f"{t}_time_total") / 1e3 / max(e.count, 1)
        if columns == "memory":
            r |= {"cpu_mem_mb": e.cpu_memory_usage / 2**20, "self_cpu_mem_mb": e.self_cpu_memory_usage / 2**20}
            if on_gpu:
                r |= {"device_mem_mb": e.device_memory_usage / 2**20,
                      "self_device_mem_mb": e.self_device_memory_usage / 2**20}
        out.append(r)
    return pd.DataFrame(out)


def show_table(avgs, sort_by: str, row_limit: int = 10, columns: str = "time", on_gpu: bool = False) -> None:
    """Print ``avgs.table(sort_by=..., row_limit=..., max_name_column_width=NAME_WIDTH)`` where it fits this output
    area (``WIDTH``); where it does not (a GPU's device columns, memory, input shapes), say how wide it is and show
    the same rows as a DataFrame (``averages_frame``) instead of a table whose every row wraps."""
    text = avgs.table(sort_by=sort_by, row_limit=row_limit, max_name_column_width=NAME_WIDTH)
    if fits(text):
        print("\n".join(line.rstrip() for line in text.splitlines()))
        return
    wide = max(len(line.rstrip()) for line in text.splitlines())
    print(f"key_averages().table() would be {wide} characters wide (a line here holds ~{WIDTH}); its rows:")
    show(averages_frame(avgs, sort_by, row_limit, columns, on_gpu), precision=3)


# --- one table, three orders --------------------------------------------------------------------------------------
def call_levels(prof) -> dict[str, int]:
    """Each host row's level in the call tree of the thread it ran on (0: a top-level row, such as ``ProfilerStep*``;
    1: what it called, such as the phases; ...), the smallest over its calls. On a GPU the autograd engine runs the
    backward on a thread of its own, whose top-level rows (``autograd::engine::evaluate_function: ...``) are level 0."""
    out: dict[str, int] = {}
    for e in prof.events():
        if not trace_events.is_host(e) or profiling.is_device_annotation(e):
            continue
        depth, parent = 0, e.cpu_parent
        while parent is not None:
            depth, parent = depth + 1, parent.cpu_parent
        out[e.key] = min(out.get(e.key, depth), depth)
    return out


def three_orders(prof, keys: Mapping[str, str], active: int, top: int = 3):
    """The host rows of ``key_averages()`` (operators and labels; kernels' own rows left out) in the three orders of
    ``keys`` (``profiling.sort_keys``): ``(table, facts)``. ``table`` holds the ``top`` rows of each order with their
    level in the call tree (``call_levels``), calls per recorded step and the three times (ms; device times where
    ``keys`` are). ``facts``: the top row of each order, its self share of its total, its level, whether it contains
    others; whether every row ran at least once per recorded step; the row among the first ten by total or by self
    time that sinks furthest by time per call, ``(name, rank by total, rank per call, calls per step)``; and the
    levels of each order's top rows."""
    import pandas as pd

    rows = [e for e in profiling.host_averages(prof) if not _on_device(e)]
    levels = call_levels(prof)
    ranked = {o: sorted(rows, key=lambda e, k=k: getattr(e, _device(k)), reverse=True) for o, k in keys.items()}
    val = {o: (lambda e, k=k: getattr(e, _device(k)) / 1e3) for o, k in keys.items()}
    table = pd.DataFrame([{"order": o, "rank": i, "name": e.key, "level": levels.get(e.key),
                           "calls_per_step": e.count / active, "self_ms": val["self"](e), "total_ms": val["total"](e),
                           "per_call_ms": val["per call"](e)}
                          for o, r in ranked.items() for i, e in enumerate(r[:top], 1)])
    pos = {o: {e.key: i for i, e in enumerate(r, 1)} for o, r in ranked.items()}
    candidates = ranked["total"][:10] + ranked["self"][:10]   # rows a reader sees near the top of either table
    sink = max(candidates, key=lambda e: pos["per call"][e.key] - pos["total"][e.key])
    tops = {o: r[0] for o, r in ranked.items()}
    facts = {"tops": {o: e.key for o, e in tops.items()},
             "self_share": val["self"](tops["self"]) / (val["total"](tops["self"]) or 1.0),
             "top_levels": {o: levels.get(e.key) for o, e in tops.items()},
             "total_contains": val["self"](tops["total"]) < val["total"](tops["total"]),
             "every_step": min(e.count for e in rows) >= active,
             "sink": (sink.key, pos["total"][sink.key], pos["per call"][sink.key], sink.count / active),
             "levels": {o: sorted({levels.get(e.key) for e in r[:top]}) for o, r in ranked.items()},
             "top_calls_per_step": {o: e.count / active for o, e in tops.items()}}
    return table, facts


def orders_sentence(facts: Mapping[str, Any]) -> str:
    """What the three orders put on top in this run (markdown), and, when two agree on the top row, why."""
    t, lv = facts["tops"], facts["levels"]

    def span(levels):
        return f"level {levels[0]}" if len(levels) == 1 else f"levels {levels[0]}–{levels[-1]}"

    if is_label(t["self"]):   # a label's self time: time inside it that no operator recorded
        out = (f"By self time the top row is not an operator in this run: `{t['self']}` is one of our labels (level "
               f"{facts['top_levels']['self']}), and its self time, {facts['self_share']:.0%} of its total, is time "
               "inside it that no operator recorded: the autograd engine's or the optimizer's own Python between "
               "operators, or this process waiting for a core on a busy machine. Run the cell again on an idle "
               "machine: the operators below it usually lead. ")
    else:
        out = (f"By self time the top rows are operators at {span(lv['self'])} of the tree; the first, `{t['self']}`, "
               f"spends {facts['self_share']:.0%} of its total in itself. ")
    out += (f"By total time: {span(lv['total'])}, led by `{t['total']}` (level {facts['top_levels']['total']}), which "
            "contains the others. ")
    if len(set(t.values())) == 3:
        out += (f"By time per call: `{t['per call']}` ({span(lv['per call'])}). Three orders, three different rows "
                "on top.")
    elif t["per call"] == t["total"]:
        out += (f"By time per call `{t['per call']}` is on top again: it contains every other row and runs "
                f"{facts['top_calls_per_step']['per call']:g}× per step, and "
                + ("every row here runs at least once per recorded step, so none can take longer per call. "
                   if facts["every_step"] else ""))
        name, by_total, per_call, calls = facts["sink"]
        if per_call > by_total:
            out += (f"The orders part further down: `{name}` is {ordinal(by_total)} by total ({calls:g} calls per "
                    f"step) but {ordinal(per_call)} per call.")
    else:
        out += f"By time per call: `{t['per call']}`."
    return out


def orders_claims(facts: Mapping[str, Any]) -> dict[str, bool]:
    """The claims the notebook checks about the three orders, computed from ``facts``: by self time the top row is an
    operator below the phase labels (level 2 or deeper); by total time a top-level row (level 0) that contains
    others; by time per call a row that runs at most once per recorded step."""
    return {"self": not is_label(facts["tops"]["self"]) and (facts["top_levels"]["self"] or 0) >= 2,
            "total": facts["top_levels"]["total"] == 0 and facts["total_contains"],
            "per call": facts["top_calls_per_step"]["per call"] <= 1}
