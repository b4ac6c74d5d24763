"""helpers.lessons.backward_hooks' harness, readings and demos (notebook 03_backward_hooks), at tiny sizes on a CPU.

Structure only, never timings: a run's rows, the metrics read from its trace, the tables, the checks' inputs."""
import importlib.util
import inspect
import warnings

import pandas as pd
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from helpers import traces as tr
from helpers.lessons import backward_hooks as hooks
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
    """The 2×2 matrix at tiny size, run once for the tests that read it."""
    mp = pytest.MonkeyPatch()
    mp.setenv("PERF_RUNS_DIR", str(tmp_path_factory.mktemp("runs")))
    try:
        lab = hooks.Lab("03_test", TINY, "cpu", Results("03_test", "smoke", {},
                                                             root=tmp_path_factory.mktemp("results")))
        rows = lab.run_matrix()
        yield lab, rows
    finally:
        mp.undo()


# -- run_config: one configuration, its metrics read from its trace ----------------------------------------------
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
    real = timing.time_steps
    monkeypatch.setattr(timing, "time_steps", lambda *a, **kw: (seen.append(torch.get_num_threads()),
                                                                real(*a, **kw))[1])
    before = torch.get_num_threads()
    row = lab.run_config(True, "indexing", name="one")
    assert row["status"] == "ok" and row["metrics"]["steps_timed"] == TINY["steps"]
    assert row["metrics"]["step_ms_mean"] > 0 and row["metrics"]["index_backward_calls"] > 0
    assert seen == [1] and lab.threads == 1 and torch.get_num_threads() == before
    assert hooks.Lab("x", TINY, "cpu", None, cpu_threads=None).threads is None


def test_time_matrix_records_interleaved_rows(lab):
    times = lab.time_matrix(rounds=2)
    assert list(times) == hooks.MATRIX and all(len(t.times_ms) == 2 for t in times.values())
    rows = {r["name"]: r for r in lab.results.experiments}
    assert list(rows) == ["interleaved det gather", "interleaved det indexing", "interleaved nondet gather",
                          "interleaved nondet indexing"]
    assert all(r["config"]["timing"] == "interleaved" and r["metrics"]["steps_timed"] == 2 for r in rows.values())


def _ev(name, ts, dur=1.0, cat="cuda_runtime", corr=None, tid=1):
    e = {"ph": "X", "name": name, "ts": ts, "dur": dur, "cat": cat, "pid": 1, "tid": tid, "args": {}}
    if corr is not None:
        e["args"]["correlation"] = corr
    return e


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
    assert m["select_backward_device_ms"] == pytest.approx(0.007)            # its kernel and its copy
    ops = hooks.two_clocks(_gpu_step_with_a_sync())
    g = hooks.node_clocks(ops, "GatherBackward0")
    assert g["rank_by_host"] == 1 and g["rank_by_device"] == 2 and g["syncs"] == 1 and g["gpu_idle_ms"] > 0
    assert g["host_share"] == pytest.approx(1000 / 1300, abs=1e-4)


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


# -- build, profile, labels ---------------------------------------------------------------------------------------
def test_build_is_seeded_and_describes_itself(lab):
    m1, _, step = lab.build()
    m2, _, _ = lab.build()
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert type(lab.build("indexing")[0].patch_drop) is pdm.IndexingPatchDropout
    step()
    assert "4 patches of which 2 are kept per image, batch 2" in lab.describe(m1)


def test_labelled_table_removes_its_hooks_and_pairs_every_module(lab):
    table, prof, model = lab.labelled_table(lambda m, lf: hooks.label_modules(m), "all")
    assert {"patch_drop", "blocks.0.attn", hooks.ROOT_NAME} <= set(table["module"])
    assert not any(mod._forward_hooks or mod._forward_pre_hooks for mod in model.modules())
    check = hooks.label_pair_check(model, torch.randn(2, 3, 32, 32), lab.acts)
    assert check["ok"] and not check["missing"] and check["before_order"] == check["forward_order"][::-1]
    assert check["paired"] == set(check["forward_order"])
    top = hooks.top_modules(table, model)
    assert list(top) == ["top_module", "top_module_backward_share", "top_leaf_module",
                         "top_leaf_module_backward_share", "patch_drop_backward_share"]
    assert "." not in top["top_module"] and 0 < top["top_module_backward_share"] <= 1


def test_label_pair_check_reports_a_missing_pair(lab, monkeypatch):
    model, _, _ = lab.build()
    from helpers.lessons.backward_hooks import readings

    real = readings.label_pairs
    monkeypatch.setattr(readings, "label_pairs", lambda ev: [s for s in real(ev) if s["module"] != "patch_drop"])
    check = hooks.label_pair_check(model, torch.randn(2, 3, 32, 32), lab.acts)
    assert check["missing"] == ["patch_drop"] and not check["ok"]


def test_interleaved_takes_its_rounds_from_the_sizes_and_pauses_the_garbage_collector(lab):
    import gc

    seen = []
    times = lab.interleaved({"a": (True, lambda: seen.append(gc.isenabled())), "b": (False, lambda: None)}, warmup=0)
    assert [len(t.times_ms) for t in times.values()] == [TINY["rounds"]] * 2
    assert seen == [False] * TINY["rounds"] and gc.isenabled()


def test_interleaved_runs_each_step_under_its_own_setting(lab):
    seen = {"det": [], "nondet": []}
    was = torch.are_deterministic_algorithms_enabled()
    times = lab.interleaved({"det": (True, lambda: seen["det"].append(torch.are_deterministic_algorithms_enabled())),
                             "nondet": (False, lambda: seen["nondet"].append(
                                 torch.are_deterministic_algorithms_enabled()))}, rounds=3, warmup=1)
    assert seen == {"det": [True] * 4, "nondet": [False] * 4}                     # 1 warm-up + 3 rounds each
    assert [len(t.times_ms) for t in times.values()] == [3, 3]
    assert torch.are_deterministic_algorithms_enabled() == was


# -- equivalence before timing ------------------------------------------------------------------------------------
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


# -- readings -----------------------------------------------------------------------------------------------------
def test_two_clocks_and_one_nodes_clocks(matrix):
    lab, _ = matrix
    ops = hooks.two_clocks(lab.docs["det gather"])
    assert {"op", "host_ms", "device_ms", "host_share", *hooks.DEVICE_ONLY_COLS} <= set(ops.columns)
    assert (ops["host_share"] > 0).all() and ops["host_share"].max() <= 1
    g = hooks.node_clocks(ops, "GatherBackward0")
    assert set(g) == {"host_ms", "device_ms", "rank_by_host", "rank_by_device", "syncs", "gpu_idle_ms", "host_share"}
    assert g["host_ms"] > 0 and g["device_ms"] == 0 and g["syncs"] == 0
    assert hooks.node_clocks(ops, "IndexBackward0") is None


def test_matrix_and_interleaved_frames_and_the_chart(matrix):
    _, rows = matrix
    mx = hooks.matrix_frame(rows, hooks.MATRIX_COLS)
    assert list(mx.columns[:2]) == ["deterministic", "method"] and len(mx) == 4
    assert "status" not in mx.columns and "error" not in mx.columns     # every row ok: nothing to say there
    assert not {"step_ms_median", "step_ms_mean"} & set(mx.columns)   # no sequential step times beside the matrix
    assert list(mx["gather_backward_calls"] > 0) == [True, False, True, False]
    failed = dict(rows)
    failed[(False, "indexing")] = {"status": "failed", "error": "OverBudget: skipped", "metrics": {}}
    fx = hooks.matrix_frame(failed, hooks.MATRIX_COLS)
    assert list(fx["status"]) == ["ok", "ok", "ok", "failed"] and fx["error"].iloc[3] == "OverBudget: skipped"
    kinds = hooks.matrix_frame(rows, hooks.KIND_COLS)
    assert not kinds[hooks.KIND_COLS].fillna(0).to_numpy().any()
    times = {k: StepTimes([1.0, 2.0, 3.0, 4.0]) for k in rows}
    fr = hooks.interleaved_frame(times)
    assert list(fr["step_ms_mean"]) == [2.5] * 4 and list(fr["step_ms_p25"]) == [1.75] * 4
    import matplotlib

    matplotlib.use("Agg")
    modules = pd.DataFrame({"module": ["blocks", "blocks.0", "patch_drop", "blocks.0.attn"], "depth": [1, 2, 1, 3],
                            "share": [0.8, 0.7, 0.1, 0.5]})      # longest first, as backward_table sorts it
    fig = hooks.results_chart(times, rows, modules, "title")
    ax1, ax2 = fig.axes
    assert len(ax1.patches) == 4 and [t.get_text() for t in ax1.texts] == ["0 syncs"] * 4
    from matplotlib.container import BarContainer

    bars = [c for c in ax1.containers if isinstance(c, BarContainer)]
    assert len(bars) == 1 and bars[0].errorbar is not None               # interquartile ranges as error bars
    assert [t.get_text() for t in ax2.get_yticklabels()] == ["patch_drop", "blocks.0", "blocks"]
    view = hooks.module_view(modules, ["depth"], 2)
    assert list(view.columns) == ["module", "backward_share"] and len(view) == 2


def _times(mean_ms, n=12, spread=0.02):
    import numpy as np

    rng = np.random.default_rng(int(mean_ms * 1000))
    return StepTimes(list(mean_ms * (1 + spread * rng.standard_normal(n))))


def test_compare_matrix_compares_the_fix_and_on_a_gpu_the_nondeterministic_pairs(tmp_path):
    res = Results("03_test", "smoke", {}, root=tmp_path)
    times = {(True, "gather"): _times(10.0), (True, "indexing"): _times(10.0),
             (False, "gather"): _times(10.0), (False, "indexing"): _times(20.0)}
    cpu = hooks.compare_matrix(res, times, on_gpu=False)
    assert [(c["a"], c["b"], c["verdict"]) for c in cpu] == [("det gather", "det indexing", "no difference")]
    assert cpu[0]["low"] <= cpu[0]["ratio"] <= cpu[0]["high"] and res.comparisons == cpu
    gpu = hooks.compare_matrix(res, times, on_gpu=True)
    assert [(c["a"], c["b"]) for c in gpu] == [("det gather", "det indexing"), ("nondet gather", "nondet indexing"),
                                               ("nondet gather", "det indexing")]
    assert [c["verdict"] for c in gpu] == ["no difference", "slower", "no difference"]   # a/b: above 1, b faster
    assert len(res.comparisons) == 3                                   # the same pair again replaces its entry
    del times[(True, "indexing")]                                       # a configuration that failed
    assert [(c["a"], c["b"]) for c in hooks.compare_matrix(res, times, True)] == [("nondet gather", "nondet indexing")]


def test_shared_steps_time_the_configurations_on_one_model(lab, monkeypatch):
    builds = []
    real = lab.build
    monkeypatch.setattr(lab, "build", lambda *a, **kw: (builds.append(a), real(*a, **kw))[1])
    steps = lab.shared_steps()
    assert len(builds) == 1                                             # one model for the four configurations
    assert list(steps) == hooks.MATRIX and [d for d, _ in steps.values()] == [True, True, False, False]
    for (det, method), (_, run) in steps.items():
        with env.deterministic(det), profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        names = {e.name for e in prof.events()}
        assert (hooks.SELECT_NODE[method] in names) and not ({*hooks.SELECT_NODE.values()} - {hooks.SELECT_NODE[method]}) & names


def _results_with_the_matrix(tmp_path, fail=None):
    res = Results("03_test", "smoke", {}, root=tmp_path)
    res.add("baseline det gather", {"deterministic": True, "method": "gather", "batch_size": 2},
            {"step_ms_mean": 9.0, "step_ms_p25": 8.0, "step_ms_p75": 10.0, "select_backward_host_ms": 0.1})
    for d, m in hooks.MATRIX:
        name = hooks.matrix_name(d, m)
        res.add(name, {"deterministic": d, "method": m, "batch_size": 2},
                {"syncs_per_step": 1.0 if d and m == "gather" else 0.0, "sync_gpu_idle_per_step_ms": 0.5})
        if name == fail:
            res.add(f"interleaved {name}", {}, {}, status="failed", error="OverBudget: stopped")
        else:
            res.add(f"interleaved {name}", {"deterministic": d, "method": m, "batch_size": 2, "timing": "interleaved"},
                    {"step_ms_mean": 10.0, "step_ms_p25": 9.0, "step_ms_p75": 11.0})
    res.add("det indexing bs=4", {"deterministic": True, "method": "indexing", "batch_size": 4},
            {"step_ms_mean": 12.0, "step_ms_p25": 11.0, "step_ms_p75": 13.0, "select_backward_host_ms": 0.2})
    return res


def test_results_table_one_row_per_configuration(tmp_path):
    res = _results_with_the_matrix(tmp_path)
    t = hooks.results_table(res, on_gpu=False)
    assert list(t.columns) == ["deterministic", "method", "step_ms_mean", "step_ms_p25", "step_ms_p75"]
    assert list(zip(t["deterministic"], t["method"])) == hooks.MATRIX and list(t["step_ms_mean"]) == [10.0] * 4
    g = hooks.results_table(res, on_gpu=True)
    assert list(g["syncs_per_step"]) == [1.0, 0.0, 0.0, 0.0] and "sync_gpu_idle_per_step_ms" in g.columns
    f = hooks.results_table(_results_with_the_matrix(tmp_path / "f", fail="nondet gather"), on_gpu=False)
    assert list(f["status"]) == ["ok", "ok", "failed", "ok"] and f["error"].iloc[2] == "OverBudget: stopped"


def test_results_table_puts_a_reference_runs_figures_beside_this_runs(tmp_path):
    from helpers.notebook import reference

    ref_res = _results_with_the_matrix(tmp_path / "h100")
    ref_doc = ref_res.to_dict()
    ref_doc["experiments"][2]["metrics"]["step_ms_mean"] = 3.5          # interleaved det gather on the GPU
    ref = reference.Reference("h100", tmp_path / "h100", ref_doc)
    t = hooks.results_table(_results_with_the_matrix(tmp_path / "here"), on_gpu=False, ref=ref)
    assert list(t.columns) == ["deterministic", "method", "step_ms_mean", "reference (h100): step mean (ms)",
                               "step_ms_p25", "step_ms_p75", "reference (h100): syncs per step"]
    assert list(t["reference (h100): step mean (ms)"]) == [3.5, 10.0, 10.0, 10.0]
    assert list(t["reference (h100): syncs per step"]) == [1.0, 0.0, 0.0, 0.0]


def test_runs_table_holds_the_configurations_timed_one_at_a_time(tmp_path):
    t = hooks.runs_table(_results_with_the_matrix(tmp_path), on_gpu=False)
    assert list(t["experiment"]) == ["baseline det gather", "det indexing bs=4"]
    assert "timing" not in t.columns and "syncs_per_step" not in t.columns and "status" not in t.columns
    assert "syncs_per_step" in hooks.runs_table(_results_with_the_matrix(tmp_path / "g"), on_gpu=True).columns


# -- ops under a backward node, in each mode ----------------------------------------------------------------------
def test_ops_under_gather_backward_and_the_fills_aside():
    x = torch.randn(3, 6, 4, requires_grad=True)
    idx = torch.tensor([[0, 2], [1, 3], [4, 5]])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        pdm.select_by_gather(x, idx).sum().backward()
    names = hooks.ops_under(prof)
    assert names and any("scatter_add" in n for n in names)
    assert hooks.ops_under(prof, "NoSuchBackward0") == []
    tree = hooks.ops_tree(prof)                                  # nested as the ops called each other
    assert sorted(n for _, n in tree) == sorted(names) and hooks.ops_tree(prof, "NoSuchBackward0") == []
    depth = dict((n, d) for d, n in reversed(tree))
    assert depth["aten::gather_backward"] == 1 and depth["aten::new_zeros"] == depth["aten::scatter_add_"] == 2
    assert [n for _, n in tree].index("aten::new_zeros") < [n for _, n in tree].index("aten::scatter_add_")
    listing = hooks.format_tree(tree).splitlines()
    assert listing[0] == "GatherBackward0" and listing[1] == "  aten::gather_backward"
    assert "    aten::scatter_add_" in listing
    assert hooks.same_ops_fills_aside(["a", "aten::fill_", "b"], ["a", "b"])
    assert not hooks.same_ops_fills_aside(["a", "b"], ["b", "a"])
    assert not hooks.same_ops_fills_aside(["a"], ["a", "aten::index_put_"])


# -- where timm selects the patches, with either timm layout ------------------------------------------------------
OLD_TIMM_PATCH_DROPOUT = '''
import torch
from torch import nn


class PatchDropout(nn.Module):
    """timm before ``patch_dropout_forward`` existed (1.0.15): the gather in the method itself."""

    def __init__(self, prob=0.5, num_prefix_tokens=1, ordered=False, return_indices=False):
        super().__init__()
        self.prob, self.num_prefix_tokens, self.ordered, self.return_indices = (prob, num_prefix_tokens, ordered,
                                                                                return_indices)

    def forward(self, x):
        if not self.training or self.prob == 0.:
            return x
        prefix_tokens, x = x[:, :self.num_prefix_tokens], x[:, self.num_prefix_tokens:]
        B, L = x.shape[0], x.shape[1]
        num_keep = max(1, int(L * (1. - self.prob)))
        keep_indices = torch.argsort(torch.randn(B, L, device=x.device), dim=-1)[:, :num_keep]
        x = x.gather(1, keep_indices.unsqueeze(-1).expand((-1, -1) + x.shape[2:]))
        return torch.cat((prefix_tokens, x), dim=1)
'''


def _load_old_timm(folder):
    """An older timm's ``timm/layers/patch_dropout.py`` (no ``patch_dropout_forward``) written under ``folder`` and
    loaded as a module of its own (the installed timm stays as it is)."""
    path = folder / "timm" / "layers" / "patch_dropout.py"
    path.parent.mkdir(parents=True)
    path.write_text(OLD_TIMM_PATCH_DROPOUT)
    spec = importlib.util.spec_from_file_location("old_timm_patch_dropout", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def old_timm(tmp_path):
    return _load_old_timm(tmp_path / "old")


def test_timm_selection_code_with_patch_dropout_forward():
    import timm.layers.patch_dropout as timm_pd

    if not hasattr(timm_pd, "patch_dropout_forward"):
        pytest.skip("this timm has no patch_dropout_forward (the other path is tested below)")
    obj, what = pdm.timm_selection_code()
    assert obj is timm_pd.patch_dropout_forward and "patch_dropout_forward" in what and "no " not in what
    assert ".gather(" in inspect.getsource(obj)


def test_timm_selection_code_without_patch_dropout_forward(monkeypatch, old_timm):
    import timm.layers

    monkeypatch.delattr("timm.layers.patch_dropout.patch_dropout_forward", raising=False)
    obj, what = pdm.timm_selection_code()
    assert obj is timm.layers.patch_dropout.PatchDropout.forward and "no `patch_dropout_forward`" in what
    monkeypatch.setattr(timm.layers, "patch_dropout", old_timm)      # an older timm, whose forward holds the gather
    obj, what = pdm.timm_selection_code()
    assert obj is old_timm.PatchDropout.forward and ".gather(" in inspect.getsource(obj)


def _origin(model, folder):
    x = torch.randn(2, 3, 32, 32)
    model(x).sum().backward()
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        model(x).sum().backward()
    doc = tr.load_trace(profiling.export_chrome_trace(prof, folder / "with_stack.pt.trace.json"))
    return tr.forward_origin(doc, "GatherBackward0")


def test_with_stack_leads_to_the_gather_in_the_installed_timms_patch_dropout_file(lab, tmp_path):
    origin = _origin(lab.model("gather"), tmp_path)
    assert hooks.gather_from_timm(origin), (origin["forward_op"], origin["call_from"], origin["stack"][:3])
    text = hooks.describe_origin(origin)
    assert "aten::gather" in text and "timm/layers/patch_dropout.py:" in text


OLDER_TIMM_ORIGIN = """
import json, sys
from pathlib import Path
import torch
from helpers.lessons import backward_hooks as hooks
from helpers.notebook.results import Results
from tests.lessons.test_backward_hooks_harness import TINY, _load_old_timm, _origin

folder = Path(sys.argv[1])
sys.path.insert(0, str(folder / "old"))   # before the first with_stack profile, which reads sys.path once
lab = hooks.Lab("03_test", TINY, "cpu", Results("03_test", "smoke", {}, root=folder / "results"))
model = lab.model("gather")
model.patch_drop = _load_old_timm(folder / "old").PatchDropout(0.5, num_prefix_tokens=1)
origin = _origin(model, folder)
print(json.dumps({"ok": hooks.gather_from_timm(origin), "call_from": origin and origin["call_from"],
                  "forward_op": origin and origin["forward_op"]}))
"""


def test_with_stack_leads_to_the_gather_in_an_older_timms_patch_dropout_file(tmp_path):
    """timm without ``patch_dropout_forward``: the gather sits in ``PatchDropout.forward``, in the same file, so the
    notebook's check holds there too. A fresh process: the profiler names files relative to the ``sys.path`` it
    read at its first ``with_stack`` profile, and the older file's folder must be on it then, as site-packages is."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env_vars = {**os.environ, "PYTHONPATH": str(root), "KINETO_LOG_LEVEL": "6"}
    done = subprocess.run([sys.executable, "-c", OLDER_TIMM_ORIGIN, str(tmp_path)], capture_output=True, text=True,
                          env=env_vars, cwd=root, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["forward_op"] == "aten::gather" and got["call_from"].startswith("timm/layers/patch_dropout.py:"), got
    assert got["ok"], got


def test_gather_from_timm_can_be_false(lab, tmp_path):
    origin = _origin(lab.model("gather"), tmp_path)
    assert not hooks.gather_from_timm(None) and not hooks.gather_from_timm({**origin, "forward_op": "aten::index"})
    assert not hooks.gather_from_timm({**origin, "call_from": "my/own/patch_dropout.py:3"})
    assert hooks.describe_origin(None).startswith("No GatherBackward0")


# -- where hooks stop working; the CUDA sync-debug reader --------------------------------------------------------
def test_hook_demos():
    msg = hooks.try_hook("article's wrapper + in-place")
    assert "inplace=False" in msg and "\n" not in msg
    assert hooks.try_hook("label_modules + in-place") == "labelled"
    assert "torch.compile" in hooks.try_hook("torch.compile")
    with pytest.raises(ValueError, match="unknown hook demo"):
        hooks.try_hook("magic")


def test_sync_debug_warnings_read_on_a_cpu_by_monkeypatching(monkeypatch):
    modes = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    line = {}

    def build_step(method):
        def step():
            if modes and modes[-1] == "warn":
                line[method] = inspect.currentframe().f_lineno + 1
                warnings.warn("called a synchronizing CUDA operation")
                warnings.warn("an unrelated warning")
                if method == "gather":
                    warnings.warn("called a synchronizing CUDA operation")
            if method == "boom" and modes and modes[-1] == "warn":
                raise RuntimeError("no driver")
        return step

    was = torch.are_deterministic_algorithms_enabled()
    out = hooks.sync_debug_warnings(build_step, ["gather", "indexing"])
    assert {m: w["count"] for m, w in out.items()} == {"gather": 2, "indexing": 1}
    assert len(out["gather"]["where"]) == 2 and out["indexing"]["where"][0].endswith(
        f"test_backward_hooks_harness.py:{line['indexing']}")
    assert modes == ["warn", 0, "warn", 0] and torch.are_deterministic_algorithms_enabled() == was
    with pytest.raises(RuntimeError, match="no driver"):
        hooks.sync_debug_warnings(build_step, ["boom"])
    assert modes[-1] == 0                                            # the debug mode is reset after an error too
