"""What deterministic mode changes in a profile (``03_backward_hooks``): the ops and kernels whose call counts differ
between two ``measure.profiling.events_frame`` tables of the same model and steps (``op_diff``), and the ops one
backward node runs in each mode (``ops_under``, compared by ``same_ops_fills_aside``)."""
from __future__ import annotations

FILL = "aten::fill_"   # deterministic mode fills newly allocated memory: added under any op that allocates

def _is_python_frame(name: str) -> bool:
    """Python-function rows of a ``with_stack`` profile (their names carry object addresses or file lines)."""
    return name.startswith("<built-in") or ".py(" in name or name.startswith("nn.Module:") or " object at 0x" in name


def op_diff(a, b, labels: tuple[str, str] = ("default", "deterministic"), time_col: str = "cpu_total_ms"):
    """Ops and kernels whose calls differ between two ``profiling.events_frame`` tables.

    Both frames should cover the same number of profiled steps. Returns one row per name with
    ``kind`` ("kernel" for device rows, else "op"), the calls and ``time_col`` in each, and
    ``change`` ("only in <label>" or "more/fewer calls"), kernels first, then by the largest
    difference in calls. Python-function rows of a ``with_stack`` profile are left out.
    """
    import pandas as pd

    la, lb = labels

    def prep(df):
        df = df[~df["name"].map(_is_python_frame)]
        return df.groupby("name").agg(calls=("calls", "sum"), time=(time_col, "sum"), on_device=("on_device", "any"))

    pa, pb = prep(a), prep(b)
    names = sorted(set(pa.index) | set(pb.index))
    rows = []
    for n in names:
        ca = int(pa["calls"].get(n, 0))
        cb = int(pb["calls"].get(n, 0))
        if ca == cb:
            continue
        dev = bool(pa["on_device"].get(n, False) or pb["on_device"].get(n, False))
        change = (f"only in {lb}" if ca == 0 else f"only in {la}" if cb == 0 else
                  f"more calls in {lb}" if cb > ca else f"fewer calls in {lb}")
        rows.append({"name": n, "kind": "kernel" if dev else "op", f"calls_{la}": ca, f"calls_{lb}": cb,
                     f"{time_col}_{la}": float(pa["time"].get(n, 0.0)), f"{time_col}_{lb}": float(pb["time"].get(n, 0.0)),
                     "change": change, "_d": abs(cb - ca)})
    cols = ["name", "kind", f"calls_{la}", f"calls_{lb}", f"{time_col}_{la}", f"{time_col}_{lb}", "change"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows)
    df["_k"] = df["kind"] != "kernel"
    return df.sort_values(["_k", "_d", "name"], ascending=[True, False, True]).reset_index(drop=True)[cols]


def ops_under(prof, node: str = "GatherBackward0") -> list[str]:
    """Names of the ops (recursively, depth first) under the first ``node`` event of a profile; [] without one."""
    out, stack = [], [e for e in prof.events() if e.name == node][:1]
    while stack:
        e = stack.pop()
        for c in e.cpu_children:
            out.append(c.name)
            stack.append(c)
    return out


def ops_tree(prof, node: str = "GatherBackward0") -> list[tuple[int, str]]:
    """The ops under the first ``node`` event of a profile as ``(depth, name)`` in call order (depth 1: called by
    the node itself, 2: called by that op, ...); [] without one."""
    first = [e for e in prof.events() if e.name == node][:1]
    out: list[tuple[int, str]] = []

    def walk(e, depth):
        for c in sorted(e.cpu_children, key=lambda c: c.time_range.start):
            out.append((depth, c.name))
            walk(c, depth + 1)

    for e in first:
        walk(e, 1)
    return out


def format_tree(tree: list[tuple[int, str]], root: str = "GatherBackward0", indent: str = "  ") -> str:
    """``ops_tree`` as an indented listing under ``root``: an op is called by the nearest op above it with less
    indentation; ops at the same indentation ran one after the other."""
    return "\n".join([root] + [f"{indent * d}{name}" for d, name in tree])


def same_ops_fills_aside(a: list[str], b: list[str]) -> bool:
    """Do two lists of op names (``ops_under`` in each mode) hold the same ops in the same order, once the filling of
    new memory (``aten::fill_``, which deterministic mode adds under any op that allocates) is set aside?"""
    return [n for n in a if n != FILL] == [n for n in b if n != FILL]
