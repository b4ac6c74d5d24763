"""helpers.lessons.torch_compile's matrix (time guard, interleaved rounds, comparisons, derived figures), the profiled
pair, and the tables and chart built from the rows (tiny steps with the aot_eager backend, or synthetic rows:
structure, never timings)."""
import time
import weakref
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from helpers.lessons import torch_compile as cl
from helpers.measure.validate import InvalidValue
from helpers.notebook.budget import Budget
from helpers.notebook.results import Results

RTOL = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 5e-2}


@pytest.fixture
def res(tmp_path):
    return Results("04_test", "smoke", {}, root=tmp_path)


def make_step(model, precision, mode, batch_size, sleep_s=0.0):
    if model not in ("mlp", "mlp2"):
        raise InvalidValue(f"unknown model {model!r}")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    if mode != "eager":
        net = torch.compile(net, backend="aot_eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(batch_size, 3, 2, 2), torch.arange(batch_size) % 3

    def step():
        time.sleep(sleep_s)
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return step


def test_matrix_compares_each_compiled_cell_with_its_eager_cell_in_interleaved_rounds(res, capsys):
    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default")]
    torch.set_float32_matmul_precision("highest")
    out = cl.run_matrix(res, cells, make_step, 4, 3, rounds=6, rtol=RTOL, compile_steps=1)
    e, c = (res.get(n) for n in out["names"])
    assert out["names"] == [cl.cell_name(*x, 4) for x in cells] and e["config"]["matmul_precision"] == "highest"
    [cmp_] = out["comparisons"]
    assert (cmp_["a"], cmp_["b"], cmp_["metric"], cmp_["n_a"]) == (e["name"], c["name"], "step_ms_mean", 6)
    m = c["metrics"]
    assert m["speedup"] == cmp_["ratio"] and m["verdict"] == cmp_["verdict"] and m["loss_match"] is True
    assert (m["break_even_steps"] == "not resolved") == (cmp_["verdict"] == "no difference")
    assert "interleaved_ms_mean" in m and "interleaved_ms_mean" in e["metrics"] and out["recompiles"] == 0
    assert "ok" in capsys.readouterr().out


def test_groups_are_timed_apart_and_pairs_compare_across_them_only_together(res):
    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default"), ("mlp2", "fp32", "eager"),
             ("mlp2", "fp32", "default")]
    names = [cl.cell_name(*x, 4) for x in cells]
    pair = [(names[1], names[3])]
    apart = cl.run_matrix(res, cells, make_step, 4, 2, rounds=4, rtol=RTOL, compile_steps=1, pairs=pair)
    assert [(c["a"], c["b"]) for c in apart["comparisons"]] == [(names[0], names[1]), (names[2], names[3])]
    together = cl.run_matrix(res, cells, make_step, 4, 2, rounds=4, rtol=RTOL, compile_steps=1, pairs=pair,
                             together=True)
    assert [(c["a"], c["b"]) for c in together["comparisons"]][-1] == pair[0]


def test_without_rounds_nothing_is_compared(res):
    out = cl.run_matrix(res, [("mlp", "fp32", "eager"), ("mlp", "fp32", "default")], make_step, 4, 4, rounds=0,
                        rtol=RTOL, compile_steps=1)
    assert out["comparisons"] == [] and "speedup" not in res.get(out["names"][1])["metrics"]
    assert [r["status"] for r in map(res.get, out["names"])] == ["ok", "ok"]


def test_bad_cells_become_failed_rows_and_the_matrix_goes_on(res):
    out = cl.run_matrix(res, [("nope", "fp32", "eager"), ("mlp", "fp32", "eager")], make_step, 4, 2, rounds=0,
                        rtol=RTOL)
    bad, ok = (res.get(n) for n in out["names"])
    assert bad["status"] == "failed" and bad["error"] == "InvalidValue: unknown model 'nope'" and ok["status"] == "ok"
    assert out["comparisons"] == []


def test_matrix_time_guard_keeps_the_later_lessons_time(res):
    state = {"t": 0.0}  # notebook time, advanced 15 s by each cell that is built
    budget = Budget(100.0, reserve_s=10.0, start=0.0, clock=lambda: state["t"])

    def slow(*a):
        state["t"] += 15.0
        return make_step(*a)

    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default"), ("mlp2", "fp32", "eager")]
    out = cl.run_matrix(res, cells, slow, 4, 2, rounds=0, rtol=RTOL, budget=budget, later_s=65.0)
    rows = [res.get(n) for n in out["names"]]
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]  # 90 - 65 = 25 s for the matrix: two cells start
    assert rows[2]["error"] == "OverBudget: skipped: the last 65 s of the time budget are kept for later lessons"
    assert budget.left() > 0  # what the later lessons were promised is still there


def test_matrix_time_guard_stops_the_cell_running_into_the_later_lessons_time(res):
    budget = Budget(100.0)
    out = cl.run_matrix(res, [("mlp", "fp32", "eager")], lambda *a: make_step(*a, sleep_s=0.2), 4, 20, rounds=0,
                        rtol=RTOL, budget=budget, later_s=budget.left() - 0.5)
    row = res.get(out["names"][0])
    assert row["status"] == "failed" and row["error"].startswith("OverBudget: stopped")


def test_rounds_that_compile_graphs_compare_medians(res):
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2, backend="eager")
    n = {"i": 0}

    def recompiling():  # a new shape at the first calls: Dynamo compiles during the rounds
        n["i"] += 1
        return f(torch.ones(min(n["i"], 3)))

    for name in ("a", "b"):
        res.add(name, {"mode": "x"}, {})
    recompiled, [c] = cl.experiment.interleave(res, {"a": recompiling, "b": lambda: None}, 4, [("a", "b")])
    assert recompiled >= 1 and c["metric"] == "step_ms_median"


def test_derive_gives_a_break_even_only_where_the_comparison_resolves():
    eager = {"losses": [2.0, 1.0], "first_steps_ms": [100.0]}
    c = {"ratio": 2.0, "low": 1.8, "high": 2.2, "verdict": "faster", "metric": "step_ms_mean",
         "samples": {"a": [10.0, 10.0], "b": [5.0, 5.0]}}
    m = {"losses": [2.0, 1.0005], "first_steps_ms": [1100.0]}
    cl.experiment.derive(eager, m, c, rtol=1e-3)
    assert m["speedup"] == 2.0 and m["break_even_steps"] == 1 + 200 and m["loss_match"] is True  # ceil(1000/5)
    m2 = {"losses": [2.0, 1.5], "first_steps_ms": [1100.0]}
    cl.experiment.derive(eager, m2, {**c, "verdict": "no difference", "low": 0.9}, rtol=1e-3)
    assert m2["break_even_steps"] == "not resolved" and m2["loss_match"] is False


def test_profile_pair_rows(res):
    out = cl.profile_pair(res, make_step, "mlp", "fp32", 4)
    assert set(out) == {"eager", "default"}
    for mode, m in out.items():
        row = res.get(f"profiled mlp fp32 {mode}")
        assert row["config"]["what"] == "profile" and m["steps_recorded"] == 3 and m["op_calls_per_step"] > 0
    assert list(cl.rows_table(res, "profiled ", ["op_calls_per_step"]).row) == ["mlp fp32 eager", "mlp fp32 default"]
    pair = ["e", "c"]
    timed = {"a": "e", "b": "c", "ratio": 2.0, "low": 1.8, "high": 2.2, "verdict": "faster"}
    assert cl.profiled_vs_timed(out, [], pair).startswith("profiled: the compiled step takes ")
    assert cl.profiled_vs_timed(out, [timed], pair).endswith("; timed: c takes 0.50× the time of e (95% interval 0.45–0.56): faster")


def _row(res, model, mode, metrics, precision="fp32", status="ok"):
    cfg = {"model": model, "precision": precision, "mode": mode, "batch_size": 4}
    return res.add(cl.cell_name(model, precision, mode, 4), cfg, metrics, status=status,
                   error=None if status == "ok" else "boom")


def test_matrix_table_and_whole_run_rows(res):
    _row(res, "swin_b", "eager", {"step_ms_mean": 10.0, "interleaved_ms_mean": 11.0})
    _row(res, "swin_b", "default", {"step_ms_mean": 8.0, "speedup": 1.3, "speedup_low": 1.2, "speedup_high": 1.4,
                                    "verdict": "faster", "compile_s": 3.0, "losses": [1.0]})
    _row(res, "swin_t", "default", {}, status="failed")
    names = [e["name"] for e in res.experiments]
    t = cl.matrix_table(res, names)
    assert list(t.step_ms[:2]) == [11.0, 8.0] and t["95% interval"][1] == "0.71–0.83" and t.error[2] == "boom"
    assert t["time vs eager"][1] == 0.769 and "speedup" not in t.columns  # compare.takes' convention
    assert "losses" not in t.columns and "steady_peak_mem_mb" not in t.columns  # only columns with a value
    cmp_ = {"ratio": 1.3, "low": 1.2, "high": 1.4, "verdict": "faster", "metric": "step_ms_mean",
            "samples": {"a": [10.0] * 4, "b": [8.0] * 4}}
    ref = SimpleNamespace(row=lambda n: None, comparison=lambda a, b: None)
    _row(res, "swin_b", "eager", {"first_steps_ms": [100.0]}, precision="fp16")
    _row(res, "swin_b", "default", {"first_steps_ms": [1100.0]}, precision="fp16")
    res.comparisons.append({**cmp_, "a": cl.cell_name("swin_b", "fp16", "eager", 4),
                            "b": cl.cell_name("swin_b", "fp16", "default", 4)})
    rows = cl.views.whole_run_rows(res, ref, 4, 64)
    assert [r["effect"][:6] for r in rows] == ["Swin-B", "Swin-T", "ConvNe"] and rows[0]["article_ratio"] == 1.41
    w = rows[0]["this_run"]  # 117,300 steps of 10 ms: eager 1173.0 s, compiled 1.1 + 117,299 x 10/1.3 ms
    assert w["steps"] == 117300 and w["low"] < w["ratio"] < w["high"] and round(w["ratio"], 2) == 1.3
    assert rows[0]["reference"] is None and rows[1]["this_run"] is None and rows[2]["this_run"] is None


def test_memory_entry_and_compute_share(res):
    _row(res, "m", "eager", {"steady_peak_mem_mb": 1000.0})
    _row(res, "m", "default", {"steady_peak_mem_mb": 893.0})
    e = cl.views.memory_entry(res, cl.cell_name("m", "fp32", "eager", 4), cl.cell_name("m", "fp32", "default", 4))
    assert e["ratio"] == 0.893 and e["pct"] == -10.7 and "-10.7%" in e["verdict"]
    assert cl.views.memory_entry(res, "nope", cl.cell_name("m", "fp32", "default", 4)) is None
    s = cl.views.compute_share("swin_t", 64, 56.124, "NVIDIA H100 80GB HBM3")  # 4.491 GMACs an image
    assert s["step_tflop"] == round(6 * 4.491 * 64 / 1000, 2) and s["peak_tflops"] == 989.0 and s["share"] < 0.05
    import torchvision  # the forward multiply-adds are torchvision's own figures

    assert all(torchvision.models.get_model_weights(n).DEFAULT.meta["_ops"] == g for n, g in cl.views.DATA["gmacs"].items())
    assert cl.views.compute_share("swin_t", 64, 56.0, "cpu") is None
    assert cl.views.compute_share("gated_mlp", 64, 5.0, "H100") is None


def test_starts_table_puts_cold_beside_warm():
    t = cl.starts_table({"compile_s_cold": 2.0, "compile_s_warm": 0.5, "fx_graph_cache_hits_warm": 3})
    assert list(t.columns) == ["metric", "cold", "warm"] and list(t.metric) == ["compile_s", "fx_graph_cache_hits"]
    assert list(t.warm) == [0.5, 3] and t.cold[0] == 2.0


def test_gpu_interleaving_synchronises_each_step_and_frees_each_group(tmp_path, monkeypatch):
    """CPU stand-in for the CUDA path: ``timing.synchronize`` (torch.cuda.synchronize on a GPU) and
    ``experiment.release`` recorded; the order of calls, and which steps are still alive when a group is freed."""
    calls, alive = [], []
    monkeypatch.setattr("helpers.measure.timing.synchronize", lambda device=None: calls.append("sync"))
    nets = []

    def make_step(model, precision, mode, batch_size):
        net = torch.nn.Linear(4, 2)
        nets.append(weakref.ref(net))
        x = torch.randn(batch_size, 4)

        def step():
            calls.append(model)
            return net(x).sum().detach()
        return step

    def release(device=None):
        import gc

        gc.collect()
        alive.append(sum(r() is not None for r in nets))
    monkeypatch.setattr(cl.experiment, "release", release)
    monkeypatch.setattr(cl.experiment, "run_cell", lambda step, **kw: {
        "losses": [float(step())], "first_steps_ms": [1.0], "step_times_ms": [1.0]})
    res = Results("04_r", "smoke", {}, root=tmp_path)
    cells = [("a", "fp32", "eager"), ("a", "fp32", "eager2"), ("b", "fp32", "eager"), ("b", "fp32", "eager2")]
    cl.run_matrix(res, cells, make_step, 2, 1, rounds=3, rtol={"fp32": 1e-3})
    # each group: its two cells' own runs, then 3 rounds of its 2 steps, each step between two synchronisations
    assert calls == (["a", "a"] + ["sync", "a", "sync"] * 6 + ["b", "b"] + ["sync", "b", "sync"] * 6)
    assert alive == [0, 0]  # each group's models are gone when it is released (one group alive at a time)


def test_release_on_a_gpu_resets_dynamo_then_frees_memory(monkeypatch):
    order = []
    monkeypatch.setattr(cl.experiment.dv, "is_cuda", lambda d: True)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: order.append("reset"))
    monkeypatch.setattr(cl.experiment.gc, "collect", lambda: order.append("collect"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: order.append("empty_cache"))
    cl.experiment.release("cuda")
    assert order == ["reset", "collect", "empty_cache"]
