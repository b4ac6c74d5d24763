"""Notebook 04's claims: each an id, a sentence and a rule over the figures a run recorded (docs/results.md,
"checks"). The notebook's closing cell of Results evaluates ``LESSON``, its appendix ``APPENDIX``; the test on the
H100 reference evaluates ``CLAIMS``, both."""

from __future__ import annotations

from helpers.notebook.checks import Claim, NotMeasured

from .experiment import cell_name

NOTEBOOK = "04_torch_compile"
TOY = ("mlp_break", "mlp_fixed")  # the graph-break toy's models


def _rows(facts):
    return facts.doc.get("experiments", [])


def _training(facts):
    """The latest row of each training cell of the matrix: a mode, not a lever, explain, profile or start row, and
    not the graph-break toy. With the note ``matrix`` (its cells' names), those cells only."""
    names = set(facts.note("matrix")["names"]) if "matrix" in facts.doc.get("notes", {}) else None
    rows = {}
    for r in _rows(facts):
        cfg = r.get("config", {})
        if "mode" not in cfg or "what" in cfg or cfg.get("model") in TOY:
            continue
        if names is None or r["name"] in names:
            rows[r["name"]] = r
    return list(rows.values())


def _compiled(facts):
    found = [
        r["metrics"]
        for r in _training(facts)
        if r["status"] == "ok" and r["config"]["mode"] != "eager"
    ]
    if not found:
        raise NotMeasured("no compiled matrix cell ran")
    return found


def _eager_pairs(facts):
    """The comparisons of a compiled matrix cell against its eager cell."""
    eager = {r["name"] for r in _training(facts) if r["config"]["mode"] == "eager"}
    compiled = {r["name"] for r in _training(facts) if r["config"]["mode"] != "eager"}
    return [c for c in facts.doc.get("comparisons", []) if c["a"] in eager and c["b"] in compiled]


def compiled_cell_faster(facts):
    from perf_doctor.stats import direction

    pairs = _eager_pairs(facts)
    if not pairs:
        raise NotMeasured("no compiled matrix cell was compared with its eager cell")
    return any(direction(c) == "faster" for c in pairs)


def every_matrix_cell_ran(facts):
    names = facts.note("matrix")["names"]
    return all(facts.has(n) for n in names)


def no_graphs_after_first_steps(facts):
    return facts.note("matrix")["recompiles"] == 0 and all(
        m["steady_graphs"] == 0 for m in _compiled(facts)
    )


def loss_matches(facts):
    return all(m.get("loss_match") for m in _compiled(facts))


def fallback_random_on_cuda_only(facts):
    return all(m["fallback_random"] == facts.gpu for m in _compiled(facts))


def first_steps_cover_compile(facts):
    return all(m["first_steps_s"] >= m["compile_s"] for m in _compiled(facts))


def reduce_overhead_is_cuda_graphs(facts):
    ro = [
        r["metrics"]
        for r in _training(facts)
        if r["status"] == "ok" and r["config"]["mode"] == "reduce-overhead"
    ]
    if not ro:
        raise NotMeasured("no reduce-overhead cell ran")
    return all(m["cudagraph_skips"] == 0 for m in ro)


def has_reduce_overhead(facts):
    return facts.gpu and any(r["config"]["mode"] == "reduce-overhead" for r in _training(facts))


def _profiled(facts, mode):
    rows = [
        r
        for r in _rows(facts)
        if r.get("config", {}).get("what") == "profile" and r["config"]["mode"] == mode
    ]
    if not rows or rows[-1]["status"] != "ok":
        raise NotMeasured(f"no profiled {mode} step")
    return rows[-1]["metrics"]


def fewer_op_calls(facts):
    return (
        _profiled(facts, "default")["op_calls_per_step"]
        < _profiled(facts, "eager")["op_calls_per_step"]
    )


def _toy(facts, model):
    bs = facts.note("graph_break")["names"][0].rsplit("bs=", 1)[1]
    return cell_name(model, "fp32", "default", int(bs))


def break_variant_breaks(facts):
    explained = facts.note("explain_breaks")
    broken, fixed = (facts.metric(_toy(facts, m), "graph_breaks") for m in TOY)
    return (
        explained["mlp_break"] >= 1 and explained["mlp_fixed"] == 0 and broken >= 1 and fixed == 0
    )


def fixed_faster_than_broken(facts):
    return facts.direction(*(_toy(facts, m) for m in TOY)) == "faster"


def explain_on_article_families(facts):
    rows = [r for r in _rows(facts) if r["name"].startswith("explain ")]
    return (
        bool(rows)
        and all(r["status"] == "ok" for r in rows)
        and any("swin" in r["name"] for r in rows)
        and any("convnext" in r["name"] for r in rows)
    )


def warm_start_hit_cache(facts):
    m = facts.row("fresh-process start: cold vs warm cache")["metrics"]
    return (
        m["fx_graph_cache_hits_warm"] > 0
        and m["fx_graph_cache_misses_warm"] == 0
        and m["compile_s_warm"] < m["compile_s_cold"]
    )


def _lever(facts, compiled):
    rows = [
        r
        for r in _rows(facts)
        if r.get("config", {}).get("what") == "lever" and r["config"]["compiled"] == compiled
    ]
    if not rows:
        raise NotMeasured(f"no lever row compiling the {compiled}")
    return facts.row(rows[-1]["name"])


def compiled_optimizer_faster(facts):
    base, opt = _lever(facts, "model"), _lever(facts, "model and optimizer")
    return facts.direction(base["name"], opt["name"]) == "faster"


def panel_refuses(facts):
    refusals = dict(facts.note("panel_refusals"))  # label -> message, or None where accepted
    ro = refusals.pop("reduce-overhead on this device")
    return all(refusals.values()) and (ro is None) == facts.gpu


def bad_cells_failed(facts):
    names = set(facts.note("bad_cells")["names"])
    rows = [r for r in _rows(facts) if r["name"] in names]
    return len(rows) == len(names) and all(r["status"] == "failed" and r["error"] for r in rows)


LESSON = [
    Claim(
        "compiled_cell_faster_than_eager",
        "a compiled matrix cell is faster than its eager cell beyond noise",
        compiled_cell_faster,
    ),
    Claim("every_matrix_cell_ran", "every matrix cell ran", every_matrix_cell_ran),
    Claim(
        "no_graphs_compiled_after_first_steps",
        "the compiled matrix cells compiled no graph after their first steps (steady steps, interleaved rounds)",
        no_graphs_after_first_steps,
    ),
    Claim(
        "compiled_loss_matches_eager",
        "compiled loss matches eager within the tolerance (fp32 1e-3, autocast 5e-2 relative)",
        loss_matches,
    ),
    Claim(
        "fallback_random_on_cuda_only",
        "on CUDA every compiled cell ran with fallback_random (on a CPU: none needed it)",
        fallback_random_on_cuda_only,
    ),
    Claim(
        "first_steps_cover_compile_time",
        "every compiled cell's first steps took at least its Dynamo compile time",
        first_steps_cover_compile,
    ),
    Claim(
        "reduce_overhead_ran_as_cuda_graphs",
        "the reduce-overhead cells ran as CUDA graphs (Inductor skipped none)",
        reduce_overhead_is_cuda_graphs,
        applies=has_reduce_overhead,
    ),
    Claim(
        "break_variant_breaks_fixed_does_not",
        "the graph-break variant has at least one break, the fixed one none",
        break_variant_breaks,
    ),
    Claim(
        "fixed_faster_than_broken",
        "the fixed compiled variant is faster than the broken one beyond noise",
        fixed_faster_than_broken,
    ),
    Claim(
        "explain_ran_on_article_families",
        "explain ran on the article's model families (Swin, ConvNeXt)",
        explain_on_article_families,
    ),
    Claim(
        "warm_start_hit_cache_and_compiled_faster",
        "a warm start in a fresh process hit the on-disk cache and compiled faster than the cold one",
        warm_start_hit_cache,
    ),
    Claim(
        "compiled_optimizer_step_faster",
        "compiling the optimizer step as well makes the compiled step faster beyond noise",
        compiled_optimizer_faster,
    ),
    Claim(
        "compiled_records_fewer_op_calls",
        "the compiled step records fewer operator calls per step than eager (fused code)",
        fewer_op_calls,
    ),
]
APPENDIX = [
    Claim(
        "panel_refuses_invalid_values",
        "invalid panel values are refused with a message",
        panel_refuses,
    ),
    Claim(
        "bad_cells_became_failed_rows",
        "bad cells became failed rows with a reason",
        bad_cells_failed,
    ),
]
CLAIMS = LESSON + APPENDIX

__all__ = ["APPENDIX", "CLAIMS", "LESSON", "NOTEBOOK"]
