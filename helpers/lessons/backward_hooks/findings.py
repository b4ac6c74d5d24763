"""Notebook 03's findings in words, computed from this run's tables (``03_backward_hooks``), and a reference GPU run's.

The article's hotspot (``GatherBackward0`` under ``patch_drop``, made long by a host-device sync in deterministic
mode on its GPU) need not be this machine's: ``clocks_finding`` and ``children_finding`` say where this run's
backward time is and whether the article's suspect is the hotspot here; ``hot_path`` follows this machine's data down
the per-module table (the longest module at each level), as the article narrowed its own. ``reference_line`` gives
the same figures from a reference GPU run (``notebook.reference``), labelled as that machine's; ``gpu_only``
says plainly that a CPU cannot show a GPU-only lesson and shows the reference's figures when there are some.
``comparison_lines`` puts the comparisons in words (``measure.compare.describe``), with a derived figure (ms per
step) only where the interval resolves the difference.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from ...measure import compare as cmp
from ...notebook import reference
from .harness import matrix_name

ARTICLE_NODE, ARTICLE_MODULE = "GatherBackward0", "patch_drop"


def clocks_finding(ops, on_gpu: bool) -> str:
    """The two-clocks table (``readings.two_clocks``, ranked by host time) in one sentence: the top node, where
    ``GatherBackward0`` ranks and whether the article's hotspot is this machine's."""
    top = ops.iloc[0]
    head = f"Top backward node by host time: **`{top['op']}`** ({top['host_share']:.0%} of the backward's host time)"
    if ARTICLE_NODE not in set(ops["op"]):
        return head + f"; no `{ARTICLE_NODE}` in this trace."
    g = ops.set_index("op").loc[ARTICLE_NODE]
    text = f"{head}; `{ARTICLE_NODE}`: #{int(g['rank_by_host'])} of {len(ops)} ({g['host_share']:.1%})"
    if on_gpu:
        text += (f", #{int(g['rank_by_device'])} by device time, {g['syncs']:g} syncs and {g['gpu_idle_ms']:.2f} ms "
                 "GPU idle per step")
    if int(g["rank_by_host"]) == 1:
        return text + ". As in the article, it tops the host clock."
    why = "" if on_gpu else " (a CPU has no host-device sync, which is what made it long on the article's GPU)"
    return text + f". The article's hotspot is not this machine's{why}: here the backward's time is in `{top['op']}`."


def children_finding(table) -> str:
    """Step 2's per-child table (``spans.backward_table``, longest first) in one sentence: the longest child, and
    where ``patch_drop`` (the article's suspect) ranks."""
    top = table.iloc[0]
    text = f"Longest child backward: **`{top['module']}`** ({top['share']:.0%})"
    if ARTICLE_MODULE not in set(table["module"]):
        return text + f"; no `{ARTICLE_MODULE}` span in this run."
    rank = list(table["module"]).index(ARTICLE_MODULE) + 1
    row = table.set_index("module").loc[ARTICLE_MODULE]
    text += f"; `{ARTICLE_MODULE}`: {row['backward_ms']:.2f} ms ({row['share']:.1%}), #{rank} of {len(table)}."
    if rank == 1:
        return text + " As in the article, the suspect is the longest child."
    return (text + f" The article's suspect is not this machine's hotspot: the data here point into "
            f"`{top['module']}`, and the all-modules table below follows them.")


def hot_path(table) -> list[dict[str, Any]]:
    """This machine's narrowing: from the longest child of the model (depth 1), the longest of its children at each
    level, down to a module with no labelled child. ``table``: ``spans.backward_table`` of every named module.
    Returns ``[{"module", "share"}, ...]`` from the top down."""
    rows = table[table["depth"] >= 1].sort_values("share", ascending=False)
    path: list[dict[str, Any]] = []
    level = rows[rows["depth"] == 1]
    while len(level):
        top = level.iloc[0]
        path.append({"module": top["module"], "share": float(top["share"])})
        level = rows[(rows["depth"] == top["depth"] + 1) & rows["module"].str.startswith(top["module"] + ".")]
    return path


def path_finding(path: list[Mapping[str, Any]]) -> str:
    """``hot_path`` in one line: ``blocks`` (64%) → ``blocks.1`` (56%) → ..."""
    if not path:
        return "No labelled module below the model in this run."
    steps = " → ".join(f"`{p['module']}` ({p['share']:.0%})" for p in path)
    return f"This machine's data, narrowed the article's way (the longest module at each level): {steps}."


def comparison_lines(comparisons: Iterable[Mapping[str, Any]], times: Mapping[str, Any] | None = None) -> str:
    """One markdown bullet per comparison (``measure.compare.describe``); where the verdict resolves a difference
    and ``times`` ({name or (deterministic, method): StepTimes}) has both sides, the milliseconds per step it amounts
    to (mean of b - mean of a)."""
    times = {matrix_name(*k) if isinstance(k, tuple) else k: t for k, t in (times or {}).items()}
    lines = []
    for c in comparisons:
        line = f"- {cmp.describe(c)}"
        if cmp.resolved(c) and times and c["a"] in times and c["b"] in times:
            ms = times[c["b"]].mean - times[c["a"]].mean
            line += f": {abs(ms):.2f} ms per step {'more' if ms > 0 else 'less'}"
        lines.append(line)
    return "\n".join(lines)


def reference_line(ref, what: str) -> str | None:
    """A reference GPU run's figures for one part of the lesson, labelled as that machine's (None without a
    reference or without those figures). ``what``: ``"clocks"`` (its top backward node and ``GatherBackward0``'s
    two clocks), ``"modules"`` (its longest child and ``patch_drop``'s share) or ``"syncs"`` (syncs per step and the
    sync-debug warnings of each configuration)."""
    if ref is None:
        return None
    notes = ref.doc.get("notes", {})
    head = f"**Reference, not this run** ({ref.source()}): "
    if what == "clocks":
        g = notes.get("gather_backward_two_clocks")
        if not g:
            return None
        return (head + f"top backward node by host time `{notes.get('top_backward_node_by_host', '?')}`; "
                f"`{ARTICLE_NODE}` #{g['rank_by_host']} by host time ({g['host_share']:.1%}), #{g['rank_by_device']} "
                f"by device time, {g['syncs']:g} syncs and {g['gpu_idle_ms']:.2f} ms GPU idle per step.")
    if what == "modules":
        if "top_module" not in notes:
            return None
        return (head + f"longest child `{notes['top_module']}` ({notes['top_module_backward_share']:.0%}), "
                f"`{ARTICLE_MODULE}` {notes.get('patch_drop_backward_share', float('nan')):.1%} of the backward.")
    if what == "syncs":
        syncs, warned = notes.get("syncs_per_step"), notes.get("sync_debug_warnings_det")
        if not syncs:
            return None
        text = head + "syncs per backward: " + ", ".join(f"{k.replace('_', ' ')} {v:g}" for k, v in syncs.items()
                                                         if v is not None)
        if warned:
            text += "; synchronising calls warned about in one deterministic step: " + ", ".join(
                f"{k} {v}" for k, v in warned.items())
        return text + "."
    raise ValueError(f"unknown part {what!r}: clocks, modules or syncs")


def gpu_only(what: str, ref, figures: Iterable[str] = ()) -> None:
    """On a CPU: say in one line that this machine cannot show ``what``, then a reference GPU run's syncs
    (``reference_line``) and its ``figures`` (``notebook.reference.show_figures``), or one line saying there is none."""
    from IPython.display import Markdown, display

    print(f"This machine has no GPU, so it cannot show {what}.")
    if ref is None:
        print("No reference GPU run to show instead (the set-up cell says where one would go).")
        return
    line = reference_line(ref, "syncs")
    if line:
        display(Markdown(line))
    if figures:
        reference.show_figures(ref, list(figures))
