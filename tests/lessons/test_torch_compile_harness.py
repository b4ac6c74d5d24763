"""helpers.lessons.torch_compile's matrix (time guard, interleaved rounds, comparisons, derived figures), the profiled
pair, and the tables and chart built from the rows (tiny steps with the aot_eager backend, or synthetic rows:
structure, never timings)."""
import time
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
    out = cl.run_matrix(res, cells, make_step, 4, 3, rounds=6, rtol=RTOL, compile_steps=1,
                        extra_config={"matmul_precision": "highest"})
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


def test_without_rounds_the_cells_own_steps_are_compared_and_said_so(res):
    out = cl.run_matrix(res, [("mlp", "fp32", "eager"), ("mlp", "fp32", "default")], make_step, 4, 4, rounds=0,
                        rtol=RTOL, compile_steps=1)
    assert [c["metric"] for c in out["comparisons"]] == ["step_ms_mean_sequential"]
    assert "speedup" in res.get(out["names"][1])["metrics"]


def test_bad_cells_become_failed_rows_and_the_matrix_goes_on(res):
    out = cl.run_matrix(res, [("nope", "fp32", "eager"), ("mlp", "fp32", "eager")], make_step, 4, 2, rounds=0,
                        rtol=RTOL)
    bad, ok = (res.get(n) for n in out["names"])
    assert bad["status"] == "failed" and bad["error"] == "InvalidValue: unknown model 'nope'" and ok["status"] == "ok"
    assert out["comparisons"] == []


def test_matrix_time_guard_skips_the_cells_after_the_matrix_share(res):
    state = {"t": 0.0}  # notebook time, advanced 15 s by each cell that is built
    budget = Budget(100.0, start=0.0, clock=lambda: state["t"])

    def slow(*a):
        state["t"] += 15.0
        return make_step(*a)

    cells = [("mlp", "fp32", "eager"), ("mlp", "fp32", "default"), ("mlp2", "fp32", "eager")]
    out = cl.run_matrix(res, cells, slow, 4, 2, rounds=0, rtol=RTOL, budget=budget, matrix_s=10.0)
    rows = [res.get(n) for n in out["names"]]
    assert rows[0]["status"] == "ok"
    for r in rows[1:]:  # after the matrix's 10 s of notebook time: skipped rows, so "every matrix cell ran" is false
        assert r["status"] == "failed"
        assert r["error"] == ("OverBudget: skipped: the matrix's share of the time budget (10 s of notebook time) "
                              "was spent")


def test_matrix_time_guard_stops_the_cell_already_running(res):
    budget = Budget(100.0)
    out = cl.run_matrix(res, [("mlp", "fp32", "eager")], lambda *a: make_step(*a, sleep_s=0.2), 4, 20, rounds=0,
                        rtol=RTOL, budget=budget, matrix_s=budget.elapsed() + 0.5)
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
    cl.derive(eager, m, c, rtol=1e-3)
    assert m["speedup"] == 2.0 and m["break_even_steps"] == 1 + 200 and m["loss_match"] is True  # ceil(1000/5)
    m2 = {"losses": [2.0, 1.5], "first_steps_ms": [1100.0]}
    cl.derive(eager, m2, {**c, "verdict": "no difference", "low": 0.9}, rtol=1e-3)
    assert m2["break_even_steps"] == "not resolved" and m2["loss_match"] is False


def test_profile_pair_rows(res):
    out = cl.profile_pair(res, make_step, "mlp", "fp32", 4)
    assert set(out) == {"eager", "default"}
    for mode, m in out.items():
        row = res.get(f"profiled mlp fp32 {mode}")
        assert row["config"]["what"] == "profile" and m["steps_recorded"] == 3 and m["op_calls_per_step"] > 0
    assert list(cl.rows_table(res, "profiled ", ["op_calls_per_step"]).row) == ["mlp fp32 eager", "mlp fp32 default"]


def _row(res, model, mode, metrics, precision="fp32", status="ok"):
    cfg = {"model": model, "precision": precision, "mode": mode, "batch_size": 4}
    return res.add(cl.cell_name(model, precision, mode, 4), cfg, metrics, status=status,
                   error=None if status == "ok" else "boom")


def test_matrix_table_article_table_and_chart(res):
    _row(res, "swin_b", "eager", {"step_ms_mean": 10.0, "interleaved_ms_mean": 11.0})
    _row(res, "swin_b", "default", {"step_ms_mean": 8.0, "speedup": 1.3, "speedup_low": 1.2, "speedup_high": 1.4,
                                    "verdict": "faster", "compile_s": 3.0, "losses": [1.0]})
    _row(res, "swin_t", "default", {}, status="failed")
    names = [e["name"] for e in res.experiments]
    t = cl.matrix_table(res, names)
    assert list(t.step_ms[:2]) == [11.0, 8.0] and t["95% interval"][1] == "1.20–1.40" and t.error[2] == "boom"
    assert "losses" not in t.columns and "steady_peak_mem_mb" not in t.columns  # only columns with a value
    ref = SimpleNamespace(label="reference H100", doc={"experiments": [
        {"name": "r", "status": "ok", "config": {"model": "swin_t", "precision": "fp16", "mode": "default"},
         "metrics": {"speedup": 1.1, "speedup_low": 1.0, "speedup_high": 1.2, "verdict": "faster"}}]})
    side = cl.article_table(res, names, ref=ref)
    assert list(side.source) == [cl.views.ARTICLE_SOURCE] * 3 + ["this run (cpu)", "reference H100"]
    assert side.speedup[0] == round(1173 / 829, 2) and side.verdict[3] == "faster"
    assert cl.speedup_chart(side) is not None


def test_starts_table_puts_cold_beside_warm():
    t = cl.starts_table({"compile_s_cold": 2.0, "compile_s_warm": 0.5, "fx_graph_cache_hits_warm": 3})
    assert list(t.columns) == ["metric", "cold", "warm"] and list(t.metric) == ["compile_s", "fx_graph_cache_hits"]
    assert list(t.warm) == [0.5, 3] and t.cold[0] == 2.0
