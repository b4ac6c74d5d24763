"""After nbmake has executed the notebooks (``make test`` runs them first), their results
honour the contract and every structural claim holds."""
import json
import os
from pathlib import Path

import pytest

from helpers.measure import compare
from helpers.notebook import results

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _doc(stem):
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load(stem)


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_results_json_matches_contract(stem):
    doc = _doc(stem)
    assert results.validate(doc) == []
    assert doc["notebook"] == stem
    assert doc["checks"], "a notebook states at least one claim"


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_every_check_holds(stem):
    doc = _doc(stem)
    failed = [k for k, v in doc["checks"].items() if not v]
    assert not failed, f"{stem}: these claims did not hold in this run: {failed}"


def test_profiler_basics_structure():
    doc = _doc("01_profiler_basics")
    names = [e["name"] for e in doc["experiments"]]
    assert {"train_step", "profiled_step"} <= set(names)
    prof = next(e for e in doc["experiments"] if e["name"] == "profiled_step")
    assert prof["status"] == "ok"
    on_gpu = str(doc["env"]["device"]).startswith("cuda")
    # on a GPU the phase times are the labels' GPU-timeline times, with the CPU's queueing times beside them
    assert prof["config"]["phase_time"] == ("gpu" if on_gpu else "cpu")
    for phase in ("forward", "backward", "optimizer_step"):
        assert prof["metrics"][f"{phase}_ms_per_step"] > 0
        if on_gpu:
            assert prof["metrics"][f"{phase}_cpu_ms_per_step"] > 0
    checks = doc["checks"]
    if on_gpu:   # the profile holds only the recorded steps' kernels (a sync before the active window)
        assert {"gpu_step_outlasts_cpu_queueing", "naive_timer_reads_low", "gpu_busy_within_span"} <= set(checks)
        assert prof["metrics"]["gpu_busy_ms"] <= 1.001 * prof["metrics"]["step_ms_mean"] * prof["metrics"]["steps_timed"]
    else:
        assert "gpu_busy_within_span" not in checks and prof["metrics"]["gpu_busy_ms"] is None
    assert {"first_step_runs_other_ops", "self_order_tops_an_op", "total_order_tops_a_top_level_row",
            "per_call_order_tops_a_once_per_step_row", "backward_chain_nests", "phases_add_up_to_the_step",
            "bad_settings_are_failed_rows", "viewed_trace_kernels_timed"} <= set(checks)
    # one step, several figures: the profiler's cost measured in alternation, a comparison with a verdict
    rows = {e["name"]: e for e in doc["experiments"]}
    for kind in ("unprofiled", "profiled"):
        row = rows[f"step (rounds, {kind})"]
        assert row["status"] == "ok" and row["config"]["profiled"] == (kind == "profiled")
        assert row["config"]["clock"] == ("wall" if on_gpu else "cpu")
        assert row["metrics"]["steps_timed"] >= 10 and row["metrics"]["step_ms_mean"] > 0
    overhead = [c for c in doc["comparisons"] if (c["a"], c["b"]) == ("unprofiled", "profiled")]
    assert len(overhead) == 1 and overhead[0]["metric"] == "step_ms_mean"
    assert overhead[0]["n_a"] == rows["step (rounds, unprofiled)"]["metrics"]["steps_timed"]
    if on_gpu:
        assert "profiler_adds_cpu_time" not in checks
        gap = [c for c in doc["comparisons"] if (c["a"], c["b"]) == ("synchronised", "naive")]
        assert len(gap) == 1 and gap[0]["role"] == "timer" and rows["async_timing"]["metrics"]["readings"] >= 2
        assert checks["naive_timer_reads_low"] == (compare.direction(gap[0]) == "faster" and gap[0]["ratio"] > 2)
    else:   # the claim holds only when its comparison says so; the async gap is a GPU-only lesson: no row here
        assert checks["profiler_adds_cpu_time"] == (compare.direction(overhead[0]) == "slower")
        assert "async_timing" not in rows
        assert not [c for c in doc["comparisons"] if (c["a"], c["b"]) == ("synchronised", "naive")]
    # the appendix's bad input became failed rows with a one-line reason, and the rest of the run went on
    failed = [e for e in doc["experiments"] if e["status"] == "failed"]
    assert len(failed) >= 2 and all(e["error"] and "\n" not in e["error"] for e in failed)


def _rows(doc):
    return {e["name"]: e for e in doc["experiments"]}


def test_backward_hooks_structure():
    doc = _doc("03_backward_hooks")
    rows = _rows(doc)
    matrix = [n for n in rows if n.startswith(("nondet ", "det ")) and ("gather" in n or "indexing" in n)]
    assert len(matrix) >= 4, matrix
    assert all(rows[n]["status"] == "ok" for n in matrix)
    for n in matrix:  # syncs counted by kind from a trace with a backward label per profiled step; two clocks read
        m = rows[n]["metrics"]
        assert m["backward_phases"] >= 1 and m["syncs_per_step"] >= 0, n
        assert {"stream_sync_per_step", "device_sync_per_step", "event_sync_per_step", "blocking_copy_per_step",
                "sync_gpu_idle_per_step_ms"} <= set(m), n
        assert m["select_backward_host_ms"] > 0, n
    eq = rows["equivalence gather vs indexing"]["metrics"]
    assert eq["grads_close"] is True and eq["loss_close"] is True
    assert "top_module" in doc["notes"] and "syncs_per_step" in doc["notes"]
    assert doc["notes"]["gather_backward_origin"]["forward_op"] == "aten::gather"
    assert doc["notes"]["deterministic_changed"], "the per-op table of what deterministic mode changed is empty"
    on_gpu = str(doc["env"]["device"]).startswith("cuda")
    # the ops under GatherBackward0 in each mode, compared (fills aside): the same on a CPU, rerouted on a GPU
    assert ("det_mode_reroutes_gather_backward" if on_gpu else "cpu_gather_backward_same_ops_fills_aside") in doc["checks"]
    assert {"every_module_labelled_once_per_step", "with_stack_links_gather_to_timm", "gather_gone_from_fixed_backward",
            "indexing_matches_gather_loss_and_grads", "full_hooks_refuse_inplace_downstream"} <= set(doc["checks"])
    # the fix's comparison and its check agree: on a CPU no difference (or a small one), on a GPU not slower
    fix = next(c for c in doc["comparisons"] if (c["a"], c["b"]) == ("det gather", "det indexing"))
    small_or_none = fix["verdict"] in ("no difference", "faster, small", "slower, small")
    if on_gpu:
        assert doc["checks"]["det_fix_not_slower"] == (small_or_none or fix["verdict"] == "faster")
    else:
        assert doc["checks"]["det_fix_no_difference_on_cpu"] == small_or_none
    expected_failures = [e for e in doc["experiments"] if e["name"].startswith("expected failure")]
    assert len(expected_failures) == 2 and all(e["status"] == "failed" and e["error"] for e in expected_failures)
    # timings are compared only from interleaved rounds: the matrix's profiles are untimed, its step times interleaved
    assert not any("step_ms_mean" in rows[n]["metrics"] for n in ("det gather", "nondet indexing"))
    for n in ("det gather", "det indexing", "nondet gather", "nondet indexing"):
        assert rows[f"interleaved {n}"]["config"]["timing"] == "interleaved"
        assert rows[f"interleaved {n}"]["metrics"]["steps_timed"] >= 2
    pairs = [(c["a"], c["b"]) for c in doc["comparisons"]]
    assert pairs == [("plain", "all modules labelled"), ("det gather", "det indexing")] + (
        [("nondet gather", "nondet indexing"), ("nondet gather", "det indexing")] if on_gpu else [])
    assert all(c["metric"] == "step_ms_mean" and c["n_a"] >= 2 and c["n_b"] >= 2 for c in doc["comparisons"])
    # the ratios are not notes of their own any more: a ratio without its interval is no finding
    assert not {"label_overhead_ratio", "det_indexing_at_least_as_fast_as_nondet_gather"} & set(doc["notes"])
    assert "." not in doc["notes"]["top_module"] and 0 < doc["notes"]["top_module_backward_share"] <= 1


def test_torch_compile_structure():
    doc = _doc("04_torch_compile")
    profiled = [e for e in doc["experiments"] if e["name"].startswith("profiled ")]
    cells = [e for e in doc["experiments"] if e["config"].get("mode") in ("eager", "default", "reduce-overhead",
                                                                          "max-autotune")
             and e not in profiled]  # training cells; the profiled steps ("what": "profile") are no cell
    # the offline trace views: a profiled eager and compiled step, each trace holding its recorded steps
    assert {e["config"]["mode"] for e in profiled if e["status"] == "ok"} == {"eager", "default"}
    assert all(e["config"].get("what") == "profile" and e["metrics"]["steps_recorded"] == 3
               and e["metrics"]["op_calls_per_step"] > 0 for e in profiled if e["status"] == "ok")
    assert any(e["config"]["mode"] == "eager" and e["status"] == "ok" for e in cells)
    compiled_ok = [e for e in cells if e["config"]["mode"] != "eager" and e["status"] == "ok"]
    assert compiled_ok, "at least one compiled cell ran"
    cuda = doc["env"].get("device", "").startswith("cuda")
    for e in cells:
        if e["status"] != "ok":
            continue
        m = e["metrics"]
        # the first steps apart, the fp32 settings and the parity setting in every row
        assert len(m["first_steps_ms"]) >= 1 and m["first_steps_s"] > 0, e["name"]
        assert m["float32_matmul_precision"] in ("highest", "high", "medium"), e["name"]
        assert m["grad_scaler"] == (e["config"]["precision"] == "fp16"), e["name"]
        assert ("scaler_skipped_steps" in m) == m["grad_scaler"], e["name"]  # fp16: the steps GradScaler skipped
        assert "steady_peak_mem_mb" in m and "first_steps_peak_mem_mb" in m, e["name"]  # one-offs apart
        if e["config"]["mode"] == "reduce-overhead":
            assert "cudagraph_skips" in m, e["name"]  # whether CUDA graphs really ran
        if e["config"]["mode"] != "eager":
            assert "compile_s" in m and "break_even_steps" in m, e["name"]
            assert m["fallback_random"] == cuda, e["name"]
    explain = [e for e in doc["experiments"] if e["name"].startswith("explain ")]
    assert any("swin" in e["name"] for e in explain) and any("convnext" in e["name"] for e in explain)
    start = next(e for e in doc["experiments"] if e["name"].startswith("fresh-process start"))
    assert start["status"] == "ok", start["error"]
    assert start["metrics"]["fx_graph_cache_misses_cold"] > 0 and start["metrics"]["fx_graph_cache_hits_warm"] > 0
    failed = [e for e in doc["experiments"] if e["status"] == "failed"]
    assert failed and all(e["error"] for e in failed)


def test_diagnose_structure():
    doc = _doc("05_diagnose")
    rows = _rows(doc)
    planted = [e for e in doc["experiments"] if e["name"].startswith("planted ") and e["config"]["planted"] != "none"]
    kinds = {e["config"]["planted"] for e in planted}
    assert {"input", "launch/overhead", "compute"} <= kinds
    if doc["env"]["device"].startswith("cuda"):
        assert "host sync" in kinds
    for e in planted:
        assert e["status"] == "ok", f"{e['name']}: {e['error']}"
        m = e["metrics"]
        if e["config"]["planted"] == "host sync":  # GPU only: a sync costs at most the GPU work it waited for, so
            if e["config"].get("item", True):      # the product it overlaps with leads; the sync is a finding
                assert m["host sync_ms"] >= 0.05 * m["step_ms_mean"], e["name"]
        else:
            assert m["top_cause"] == e["config"]["planted"], e["name"]
        assert m["causes_ms_sum"] <= m["step_ms_mean"] + 0.005  # causes are rounded to the µs
    # the sync case on a GPU trace: this run's own on a GPU (above); the project's reference traces
    # (data/reference/<gpu>/05_diagnose/) wherever they exist, and then the doctor finds the syncs of one of them
    refs = [e for e in doc["experiments"] if e["name"].startswith("reference trace ")]
    assert ("reference_trace_shows_syncs" in doc["checks"]) == bool(refs)
    if refs:
        assert any(e["metrics"].get("host sync_ms", 0) > 0 for e in refs)
    assert not any("gpu-traces" in json.dumps(e["config"]) for e in doc["experiments"])
    disk = rows["unknown bottleneck 'disk'"]   # run_case with an unknown plant: a failed row, not an exception
    assert disk["status"] == "failed" and disk["error"] and "\n" not in disk["error"]
    bad = [e for e in doc["experiments"] if e["name"].startswith("expected failure")]
    assert len(bad) >= 3 and all(e["status"] == "failed" and e["error"] for e in bad)
