"""Notebook 01's claims: id → sentence, id → rule over the figures its cells record (the ``profiled_step`` row's
metrics, the notes, the comparisons), judged in its closing cell and on the GPU reference (tests/lessons)."""

from ...notebook.checks import Claim, NotMeasured, always, on_gpu

NOTEBOOK = "01_profiler_basics"
PHASES = ("forward", "backward", "optimizer_step")
BAD = ("step bs=0 fp32", "fp64", "det='abc'")  # the three refused settings, by row name


def on_cpu(facts) -> bool:
    return not facts.gpu


def _m(facts, key):
    return facts.metric("profiled_step", key)


def _trace(facts, key):
    return facts.note("trace")[key]


def naive_reads_low(f) -> bool:
    gap = f.comparison("synchronised", "naive", "ms_per_call_mean")
    return f.direction("synchronised", "naive", "ms_per_call_mean") == "faster" and gap["ratio"] > 2


def bad_rows_refused(f) -> bool:
    rows = [r for r in f.doc.get("experiments", []) if any(b in r.get("name", "") for b in BAD)]
    if len(rows) < len(BAD):
        raise NotMeasured(f"{len(rows)} of the {len(BAD)} refused rows")
    return all(r["status"] == "failed" and r["error"] and "\n" not in r["error"] for r in rows)


SENTENCES = {
    "naive_timer_reads_low": "an unsynchronised timer reads under half the GPU's time",
    "footer_self_cpu_matches_steps": "the footer's Self CPU time total is the steps' CPU time, within 5%",
    "calls_count_active_steps_only": "# of Calls counts the recorded steps only (conv2d: blocks x steps)",
    "self_order_tops_an_op": "by Self time the top row is an op below the phase labels",
    "total_order_tops_a_top_level_row": "by Total time the top row is a top-level row holding others",
    "per_call_order_tops_a_once_per_step_row": "by time per call the top row runs at most once a step",
    "every_phase_has_gpu_time": "every phase has GPU time (its launches found on the GPU timeline)",
    "gpu_step_outlasts_cpu_queueing": "each recorded step ran longer on the GPU than it took to queue",
    "gpu_busy_within_span": "the kernels' time fits the recorded steps' GPU span: no earlier kernels",
    "every_phase_once_per_recorded_step": "every labelled phase appears once per recorded step",
    "phases_add_up_to_the_step": "the phases add up to the profiled step within 15%",
    "backward_chain_nests": "the backward wait chain nests (evaluate_function >= node >= aten op)",
    "first_step_runs_other_ops": "a first step runs ops later ones do not; steps 2 and 3 run the same",
    "profiler_adds_cpu_time": "on a CPU the profiler makes each step slower (interleaved rounds)",
    "chrome_trace_holds_phase_labels": "the exported Chrome trace holds the phase labels",
    "tensorboard_trace_phase_per_active_step": "the loop's trace holds each phase once per active step",
    "viewed_trace_kernels_timed": "the viewed trace's kernels all have a duration (a CPU trace: none)",
    "bad_settings_are_failed_rows": "bad settings (batch 0, fp64, deterministic='abc'): failed rows",
}
RULES = {
    "naive_timer_reads_low": naive_reads_low,
    "footer_self_cpu_matches_steps": lambda f: (
        abs(_m(f, "self_cpu_total_ms") / _m(f, "steps_cpu_ms") - 1) <= 0.05
    ),
    "calls_count_active_steps_only": lambda f: _m(f, "conv_calls") == _m(f, "conv_calls_expected"),
    "self_order_tops_an_op": lambda f: _m(f, "self_top_level") >= 2,
    "total_order_tops_a_top_level_row": lambda f: (
        _m(f, "total_top_level") == 0 and _m(f, "total_top_contains")
    ),
    "per_call_order_tops_a_once_per_step_row": lambda f: _m(f, "per_call_top_calls_per_step") <= 1,
    "every_phase_has_gpu_time": lambda f: all(_m(f, f"{p}_ms_per_step") > 0 for p in PHASES),
    "gpu_step_outlasts_cpu_queueing": lambda f: _m(f, "gpu_over_cpu_min") > 1,
    "gpu_busy_within_span": lambda f: _m(f, "gpu_busy_share") <= 1.001,
    "every_phase_once_per_recorded_step": lambda f: all(
        _m(f, "phase_calls")[p] == _m(f, "steps_timed") for p in PHASES
    ),
    "phases_add_up_to_the_step": lambda f: abs(1 - _m(f, "label_coverage")) <= 0.15,
    "backward_chain_nests": lambda f: _m(f, "chain_nests") is True,
    "first_step_runs_other_ops": lambda f: (
        bool(f.note("first_step")["only_ops"]) and f.note("first_step")["later_same"] is True
    ),
    "profiler_adds_cpu_time": lambda f: f.direction("unprofiled", "profiled") == "slower",
    "chrome_trace_holds_phase_labels": lambda f: _trace(f, "chrome_labels") is True,
    "tensorboard_trace_phase_per_active_step": lambda f: (
        set(_trace(f, "phase_counts").values()) == {_trace(f, "active")}
    ),
    "viewed_trace_kernels_timed": lambda f: (
        (_trace(f, "kernels")["kernels"] > 0) == f.gpu
        and _trace(f, "kernels")["zero_duration"] == 0
    ),
    "bad_settings_are_failed_rows": bad_rows_refused,
}
GPU_ONLY = {"naive_timer_reads_low", "every_phase_has_gpu_time", "gpu_step_outlasts_cpu_queueing"}
GPU_ONLY |= {"gpu_busy_within_span"}
CPU_ONLY = {"footer_self_cpu_matches_steps", "profiler_adds_cpu_time"}


def _applies(claim_id):
    return on_gpu if claim_id in GPU_ONLY else on_cpu if claim_id in CPU_ONLY else always


CLAIMS = [Claim(i, SENTENCES[i], RULES[i], _applies(i)) for i in SENTENCES]
