"""helpers.lessons.backward_hooks' experiment and views (notebook 03_backward_hooks), at tiny sizes on a CPU.

Structure only, never timings: a run's rows, the metrics read from its trace, the tables, the chart."""
import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import perf_doctor as tr
from helpers.lessons import backward_hooks as hooks
from helpers.lessons.backward_hooks import experiment
from helpers.lessons.backward_hooks import patch_dropout as pdm
from helpers.measure import profiling, validate
from helpers.measure.timing import StepTimes
from helpers.notebook import env
from helpers.notebook.results import Results

pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing")

TINY = dict(batch_size=2, image_size=32, patch_size=16, depth=1, width=32, heads=2, steps=2, warmup=1, rounds=3,
            wait=0, warmup_steps=1, active=2)


@pytest.fixture
def lab(tmp_path, monkeypatch):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))
    results = Results("03_test", "smoke", {}, root=tmp_path / "results")
    return hooks.Lab("03_test", TINY, "cpu", results)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """The 2x2 matrix at tiny size, run once for the tests that read it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PERF_RUNS_DIR", str(tmp_path_factory.mktemp("runs")))
    try:
        lab = hooks.Lab("03_test", TINY, "cpu", Results("03_test", "smoke", {},
                                                             root=tmp_path_factory.mktemp("results")))
        rows = lab.run_matrix()
        yield lab, rows
    finally:
        mp.undo()


def test_run_matrix_profiles_untimed_and_reads_syncs_and_both_clocks_from_the_trace(matrix):
    lab, rows = matrix
    assert list(rows) == hooks.MATRIX == [(True, "gather"), (True, "indexing"), (False, "gather"), (False, "indexing")]
    assert [r["name"] for r in rows.values()] == ["det gather", "det indexing", "nondet gather", "nondet indexing"]
    for (det, method), row in rows.items():
        m = row["metrics"]
        assert row["status"] == "ok" and row["config"] == {"deterministic": det, "method": method, "batch_size": 2}
        assert "steps_timed" not in m and "step_ms_mean" not in m     # its step times come from interleaved rounds
        assert m["backward_phases"] == TINY["active"]                     # one `backward` label per profiled step
        assert m["syncs_per_step"] == 0 and m["sync_gpu_idle_per_step_ms"] == 0   # a CPU trace has no sync
        assert {f"{k}_per_step" for k in tr.KINDS} <= set(m)
        assert m["select_backward_host_ms"] > 0 and m["select_backward_device_ms"] == 0
        gather = method == "gather"
        assert (m["gather_backward_calls"] > 0) is gather and (m["index_backward_calls"] > 0) is not gather
        assert row["name"] in lab.profs and row["name"] in lab.docs
        assert profiling.trace_files(m["trace_dir"])


def test_run_config_times_a_configuration_with_one_thread_on_a_cpu(lab, monkeypatch):
    from helpers.measure import timing

    seen = []
    real = timing.interleaved_times

    def spy(*a, **kw):  # on a CPU: one thread and process CPU time (as 01 times its CPU rounds)
        seen.append((torch.get_num_threads(), kw.get("cpu_time")))
        return real(*a, **kw)

    monkeypatch.setattr(timing, "interleaved_times", spy)
    before = torch.get_num_threads()
    row = lab.run_config(True, "indexing", name="one")
    assert row["status"] == "ok" and row["metrics"]["steps_timed"] == TINY["steps"]
    assert row["metrics"]["step_ms_mean"] > 0 and row["metrics"]["index_backward_calls"] > 0
    assert seen == [(1, True)] and lab.threads == 1 and torch.get_num_threads() == before
    assert hooks.Lab("x", TINY, "cpu", None, cpu_threads=None).threads is None


def test_time_matrix_records_interleaved_rows(lab):
    times = lab.time_matrix(rounds=2)
    assert list(times) == hooks.MATRIX and all(len(t.times_ms) == 2 for t in times.values())
    rows = {r["name"]: r for r in lab.results.experiments}
    assert list(rows) == ["interleaved det gather", "interleaved det indexing", "interleaved nondet gather",
                          "interleaved nondet indexing"]
    assert all(r["config"]["timing"] == "interleaved" and r["metrics"]["steps_timed"] == 2 for r in rows.values())


def test_trace_metrics_name_the_node_of_each_method(matrix):
    lab, _ = matrix
    doc = lab.docs["det gather"]
    assert hooks.trace_metrics(doc, "gather")["select_backward_host_ms"] > 0
    assert hooks.trace_metrics(doc, "indexing")["select_backward_host_ms"] is None   # no IndexBackward0 in it


@pytest.mark.parametrize("bad", ["abc", 1, 0, None, "False"])
def test_a_deterministic_value_that_is_not_a_boolean_is_a_failed_row(lab, bad):
    row = lab.run_config(bad, "gather")
    assert row["status"] == "failed" and row["name"] == f"deterministic={bad!r} gather bs=2"
    assert "deterministic must be True or False" in row["error"] and "\n" not in row["error"]
    assert row["config"]["deterministic"] == bad and not lab.profs


def test_bad_method_and_batch_size_are_failed_rows(lab):
    rows = [lab.run_config(True, "gather", 0, name="bs 0"), lab.run_config(True, "scatter", name="scatter")]
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert "at least 1" in rows[0]["error"] and "unknown patch-dropout method 'scatter'" in rows[1]["error"]


@pytest.mark.parametrize("bad,match", [
    ({"deterministic": "abc", "method": "gather", "batch_size": 8}, "deterministic must be True or False, not 'abc'"),
    ({"deterministic": True, "method": "gather", "batch_size": 0}, "at least 1"),
    ({"deterministic": True, "method": "gather", "batch_size": 2048}, "limit of 1024"),
    ({"deterministic": True, "method": "scatter", "batch_size": 8}, "unknown patch-dropout method"),
])
def test_the_panel_refuses_bad_values(bad, match):
    with pytest.raises(validate.InvalidValue, match=match):
        hooks.validate_config(bad)


def test_the_panel_refuses_a_deterministic_that_is_not_a_boolean():
    """The notebook's panel: a control whose value is "abc" (a Text, say, where a Checkbox was) never runs."""
    import ipywidgets as W

    from helpers.notebook import panels

    seen = []
    det = W.Text(value="abc")
    panel = panels.run_panel(lambda **kw: seen.append(kw), {"deterministic": det, "method": W.Text(value="gather"),
                                                            "batch_size": W.IntText(value=2)},
                             validate=hooks.validate_config, show=lambda r: None)
    panel.click()
    assert not seen and "Refused" in panel.status.value and "True or False" in panel.status.value
    panel.children[1].value = "True"                                    # still a string
    panel.click()
    assert not seen
    controls = {"deterministic": W.Checkbox(value=False), "method": W.Text(value="gather"),
                "batch_size": W.IntText(value=2)}
    panel = panels.run_panel(lambda **kw: seen.append(kw), controls, validate=hooks.validate_config,
                             show=lambda r: None)
    panel.click()
    assert seen == [{"deterministic": False, "method": "gather", "batch_size": 2}]


def test_the_panel_takes_good_values():
    good = {"deterministic": False, "method": "indexing", "batch_size": 4}
    assert hooks.validate_config(good) == good


def test_interleaved_takes_its_rounds_from_the_sizes_and_pauses_the_garbage_collector(lab):
    import gc

    seen = []
    times = lab.interleaved({"a": (True, lambda: seen.append(gc.isenabled())), "b": (False, lambda: None)})
    assert [len(t.times_ms) for t in times.values()] == [TINY["rounds"]] * 2
    assert seen == [False] * (TINY["warmup"] + TINY["rounds"]) and gc.isenabled()


def test_interleaved_runs_each_step_under_its_own_setting(lab):
    seen = {"det": [], "nondet": []}
    was = torch.are_deterministic_algorithms_enabled()
    times = lab.interleaved({"det": (True, lambda: seen["det"].append(torch.are_deterministic_algorithms_enabled())),
                             "nondet": (False, lambda: seen["nondet"].append(
                                 torch.are_deterministic_algorithms_enabled()))}, rounds=3)
    assert seen == {"det": [True] * 4, "nondet": [False] * 4}                     # 1 warm-up + 3 rounds each
    assert [len(t.times_ms) for t in times.values()] == [3, 3]
    assert torch.are_deterministic_algorithms_enabled() == was


def test_equivalence_of_the_two_selections(lab):
    with env.deterministic(True):
        eq = lab.equivalence()
    assert set(eq) == {"loss_equal", "loss_close", "grad_max_abs_diff", "grads_close"}
    assert eq["loss_close"] and eq["grads_close"] and eq["grad_max_abs_diff"] < 1e-5


def test_equivalence_sees_a_wrong_selection(lab, monkeypatch):
    real = pdm.select_by_index
    # other patches than timm keeps (a scaled, shifted or reordered selection would not show: the class token's
    # output is blind to those, through LayerNorm and attention)
    monkeypatch.setattr(pdm, "select_by_index", lambda x, idx: real(x, (idx + 1) % x.shape[1]))
    eq = lab.equivalence()
    assert not eq["loss_equal"] and not eq["loss_close"] and not eq["grads_close"] and eq["grad_max_abs_diff"] > 0


from tests.fake_trace import ev as _ev  # noqa: E402  (the one fake-trace builder the tests share)


def _gpu_step_with_a_sync():
    """One profiled GPU step as a trace: inside the `backward` label, a matrix product's node launches a long kernel;
    the gather's node launches a tiny kernel and a device-to-host copy, then waits for it (cudaStreamSynchronize)
    while the GPU idles."""
    node = "autograd::engine::evaluate_function: "
    return {"traceEvents": [
        _ev("ProfilerStep#1", 0, 2000, "user_annotation"),
        _ev("backward", 50, 1300, "user_annotation"),
        _ev(node + "MmBackward0", 100, 20, "cpu_op"),
        _ev("cudaLaunchKernel", 105, 5, corr=1),
        _ev("ampere_sgemm_128x64_nn", 130, 500, "kernel", corr=1, tid=7),
        _ev(node + "GatherBackward0", 200, 1000, "cpu_op"),
        _ev("cudaLaunchKernel", 210, 5, corr=2),
        _ev("scatter_add_kernel", 640, 5, "kernel", corr=2, tid=7),
        _ev("cudaMemcpyAsync", 220, 5, corr=3),
        _ev("Memcpy DtoH (Device -> Pageable)", 650, 2, "gpu_memcpy", corr=3, tid=7),
        _ev("cudaStreamSynchronize", 230, 960),
        _ev("ampere_sgemm_128x64_nn", 1250, 300, "kernel", corr=4, tid=7),
    ]}


def test_trace_metrics_on_a_gpu_trace_with_a_sync():
    """The GPU branch of run_config's metrics, on a CPU: a sync inside the backward, counted once by kind, its GPU
    idle time, and both clocks of the gather's node."""
    m = hooks.trace_metrics(_gpu_step_with_a_sync(), "gather")
    assert m["syncs_per_step"] == 1 and m["backward_phases"] == 1 and m["stream_sync_per_step"] == 1
    assert m["device_sync_per_step"] == 0 and m["blocking_copy_per_step"] == 0
    assert 0 < m["sync_gpu_idle_per_step_ms"] <= 0.96                 # at most the host call's wait
    assert m["select_backward_host_ms"] == pytest.approx(1.0)
    assert m["select_backward_device_ms"] == pytest.approx(0.007)     # its kernel and its copy
    g = hooks.two_clocks(_gpu_step_with_a_sync()).set_index("op").loc["GatherBackward0"]
    assert g["rank_by_host"] == 1 and g["rank_by_device"] == 2 and g["syncs"] == 1 and g["gpu_idle_ms"] > 0
    assert g["host_share"] == pytest.approx(1000 / 1300, abs=1e-4)


# -- build, profile, the matrix timed on one model ---------------------------------------------------------------
def test_build_is_seeded(lab):
    m1, _, step = lab.build()
    m2, _, _ = lab.build()
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert type(lab.build("indexing")[0].patch_drop) is pdm.IndexingPatchDropout
    assert step().ndim == 0


def test_profile_sets_the_mode_for_the_block_only(lab):
    seen = []
    was = torch.are_deterministic_algorithms_enabled()
    prof, tdir = lab.profile(lambda: seen.append(torch.are_deterministic_algorithms_enabled()), deterministic=True)
    assert seen == [True] * 3 and tdir is None and torch.are_deterministic_algorithms_enabled() == was
    _, tdir = lab.profile(lambda: torch.ones(2).sum(), name="named", deterministic=False)
    assert profiling.trace_files(tdir)


def test_time_matrix_times_the_four_configurations_on_one_model(lab, monkeypatch):
    builds, nodes = [], {}
    real = lab.build
    monkeypatch.setattr(lab, "build", lambda *a, **kw: (builds.append(a), real(*a, **kw))[1])
    real_times = experiment.timing.interleaved_times

    def spy(steps, rounds, device=None, warmup=0, cpu_time=False):
        for key, run in steps.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                run()
            nodes[key] = {n for n in experiment.SELECT_NODE.values() if n in {e.name for e in prof.events()}}
        return real_times(steps, rounds, device, warmup, cpu_time)

    monkeypatch.setattr(experiment.timing, "interleaved_times", spy)
    times = lab.time_matrix(rounds=1)
    assert len(builds) == 1 and list(times) == hooks.MATRIX
    assert nodes == {k: {experiment.SELECT_NODE[k[1]]} for k in hooks.MATRIX}


# -- views ---------------------------------------------------------------------------------------------------------
def test_two_clocks_on_a_cpu_trace(matrix):
    lab, _ = matrix
    ops = hooks.two_clocks(lab.docs["det gather"])
    assert {"op", "host_ms", "device_ms", "host_share", "rank_by_host"} <= set(ops.columns)
    assert (ops["host_share"] > 0).all() and ops["host_share"].max() <= 1
    g = ops.set_index("op").loc["GatherBackward0"]
    assert g["host_ms"] > 0 and g["device_ms"] == 0 and g["syncs"] == 0


def _results_with_the_matrix(tmp_path, fail=None):
    res = Results("03_test", "smoke", {}, root=tmp_path)
    res.add("baseline det gather", {"deterministic": True, "method": "gather", "batch_size": 2},
            {"step_ms_mean": 9.0, "step_ms_p25": 8.0, "step_ms_p75": 10.0, "select_backward_host_ms": 0.1})
    for d, m in hooks.MATRIX:
        name = hooks.matrix_name(d, m)
        res.add(name, {"deterministic": d, "method": m, "batch_size": 2},
                {"syncs_per_step": 1.0 if d and m == "gather" else 0.0, "sync_gpu_idle_per_step_ms": 0.5,
                 "select_backward_host_ms": 0.1, "gather_backward_calls": 2 if m == "gather" else 0,
                 "index_backward_calls": 0 if m == "gather" else 2})
        if name == fail:
            res.add(f"interleaved {name}", {}, {}, status="failed", error="OverBudget: stopped")
        else:
            res.add(f"interleaved {name}", {"deterministic": d, "method": m, "batch_size": 2, "timing": "interleaved"},
                    {"step_ms_mean": 10.0, "step_ms_p25": 9.0, "step_ms_p75": 11.0})
    res.add("det indexing bs=4", {"deterministic": True, "method": "indexing", "batch_size": 4},
            {"step_ms_mean": 12.0, "step_ms_p25": 11.0, "step_ms_p75": 13.0, "select_backward_host_ms": 0.2})
    res.add("expected failure: batch size 0", {"deterministic": True, "method": "gather", "batch_size": 0}, {},
            status="failed", error="InvalidValue: batch size must be at least 1 (got 0).")
    return res


def test_matrix_table_one_row_per_configuration(tmp_path):
    t = hooks.matrix_table(_results_with_the_matrix(tmp_path), on_gpu=False)
    assert list(t.columns) == ["deterministic", "method", "step_ms_mean", "step_ms_p25", "step_ms_p75",
                               "select_backward_host_ms", "gather_backward_calls", "index_backward_calls"]
    assert list(zip(t["deterministic"], t["method"])) == hooks.MATRIX and list(t["step_ms_mean"]) == [10.0] * 4
    g = hooks.matrix_table(_results_with_the_matrix(tmp_path / "g"), on_gpu=True)
    assert list(g["syncs_per_step"]) == [1.0, 0.0, 0.0, 0.0] and "sync_gpu_idle_per_step_ms" in g.columns
    f = hooks.matrix_table(_results_with_the_matrix(tmp_path / "f", fail="nondet gather"), on_gpu=False)
    assert list(f["status"]) == ["ok", "ok", "failed", "ok"] and f["error"].iloc[2] == "OverBudget: stopped"


def test_matrix_table_puts_a_reference_runs_figures_beside_this_runs(tmp_path):
    from helpers.notebook import reference

    ref_doc = _results_with_the_matrix(tmp_path / "h100").to_dict()
    ref_doc["experiments"][2]["metrics"]["step_ms_mean"] = 3.5          # interleaved det gather on the GPU
    ref = reference.Reference("h100", tmp_path / "h100", ref_doc)
    t = hooks.matrix_table(_results_with_the_matrix(tmp_path / "here"), on_gpu=False, ref=ref)
    assert list(t.columns[:4]) == ["deterministic", "method", "step_ms_mean", "reference (h100): step mean (ms)"]
    assert list(t["reference (h100): step mean (ms)"]) == [3.5, 10.0, 10.0, 10.0]
    assert list(t["reference (h100): syncs per step"]) == [1.0, 0.0, 0.0, 0.0]


def test_runs_table_holds_the_configurations_timed_one_at_a_time(tmp_path):
    t = hooks.runs_table(_results_with_the_matrix(tmp_path), on_gpu=False)
    assert list(t["experiment"]) == ["baseline det gather", "det indexing bs=4"]
    assert "timing" not in t.columns and "syncs_per_step" not in t.columns and "status" not in t.columns
    assert "syncs_per_step" in hooks.runs_table(_results_with_the_matrix(tmp_path / "g"), on_gpu=True).columns


def test_results_chart():
    import matplotlib

    matplotlib.use("Agg")
    times = {k: StepTimes([1.0, 2.0, 3.0, 4.0]) for k in hooks.MATRIX}
    modules = pd.DataFrame({"module": ["blocks", "blocks.0", "patch_drop", "blocks.0.attn"], "depth": [1, 2, 1, 3],
                            "share": [0.8, 0.7, 0.1, 0.5]})      # longest first, as module_table sorts it
    fig = hooks.results_chart(times, modules, "title")
    ax1, ax2 = fig.axes
    assert len(ax1.patches) == 4 and ax1.get_xticklabels()[0].get_text() == "det\ngather"
    from matplotlib.container import BarContainer

    bars = [c for c in ax1.containers if isinstance(c, BarContainer)]
    assert len(bars) == 1 and bars[0].errorbar is not None               # interquartile ranges as error bars
    assert [t.get_text() for t in ax2.get_yticklabels()] == ["patch_drop", "blocks.0", "blocks"]


def test_trace_diff_on_the_cpu_matrix_traces(matrix):
    lab, _ = matrix
    d = hooks.trace_diff(lab.docs["nondet gather"], lab.docs["det gather"], top=5)
    assert 0 < len(d) <= 5 and set(d["kind"]) == {"op"}   # a CPU trace: ops only, host time
    fill = d.set_index("name").loc["aten::fill_"]
    assert fill["calls_deterministic"] > fill["calls_default"]
    assert hooks.trace_diff(lab.docs["det gather"], lab.docs["det gather"]).empty


def test_the_time_guard_skips_runs_but_never_the_checks_of_bad_values(lab):
    from helpers.notebook.budget import Budget

    lab.budget = Budget(1.0, start=-1e9)   # spent long ago
    bad = lab.run_config(True, "scatter", name="bad")
    assert bad["status"] == "failed" and "InvalidValue" in bad["error"]
    skipped = lab.run_config(True, "gather", name="skipped")
    assert skipped["status"] == "failed" and "OverBudget" in skipped["error"]
    assert lab.time_matrix() == {}
    rows = [lab.results.get(f"interleaved {hooks.matrix_name(d, m)}") for d, m in hooks.MATRIX]
    assert all(r["status"] == "failed" and "OverBudget" in r["error"] for r in rows)
    assert lab.run_config(True, "gather", name="panel", guarded=False, timed=False)["status"] == "ok"
