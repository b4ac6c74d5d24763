"""helpers.compile_lab: refusals, arithmetic, explain summary, parity, failed rows (fast: no inductor compile)."""
import pytest
import torch

from helpers import compile_lab as cl, timing
from helpers.results import Results
from helpers.widgets import InvalidValue

CPU = torch.device("cpu")
TINY = dict(image_size=8, hidden=16, n_batches=2, compile_steps=1)


def test_unknown_mode_refused_clearly():
    with pytest.raises(InvalidValue, match="unknown compile mode 'turbo'"):
        cl.run_cell("mlp", "fp32", "turbo", 4, 2, **TINY)


def test_unknown_model_refused_clearly():
    with pytest.raises(InvalidValue, match="unknown model 'resnet9000'"):
        cl.run_cell("resnet9000", "fp32", "eager", 4, 2, **TINY)


def test_reduce_overhead_refused_on_cpu():
    with pytest.raises(InvalidValue, match="CUDA graphs"):
        cl.check_cell("mlp", "fp32", "reduce-overhead", 4, CPU)


def test_bad_batch_size_refused():
    with pytest.raises(InvalidValue, match="at least 1"):
        cl.check_cell("mlp", "fp32", "eager", 0, CPU)


def test_max_autotune_allowed_on_cpu():
    cl.check_cell("mlp", "fp32", "max-autotune", 4, CPU)  # allowed (slow), not refused


def test_break_even_arithmetic():
    assert cl.break_even_steps(10.0, eager_ms=100.0, compiled_ms=80.0) == 500
    assert cl.break_even_steps(1.0, eager_ms=100.0, compiled_ms=99.7) == 3334  # rounds up
    assert cl.break_even_steps(10.0, eager_ms=100.0, compiled_ms=100.0) == "never"
    assert cl.break_even_steps(10.0, eager_ms=100.0, compiled_ms=120.0) == "never"
    assert cl.break_even_steps(None, eager_ms=100.0, compiled_ms=50.0) == "never"


def test_loss_parity():
    ok = cl.loss_parity([2.0, 1.5, 1.0], [2.001, 1.5, 0.999], rtol=1e-2)
    assert ok["match"] and ok["max_abs_diff"] == pytest.approx(0.001)
    bad = cl.loss_parity([2.0, 1.5, 1.0], [2.0, 1.5, 1.2], rtol=1e-2)
    assert not bad["match"] and bad["max_rel_diff"] == pytest.approx(0.2)
    assert not cl.loss_parity([1.0, 2.0], [1.0], rtol=1.0)["match"]
    assert not cl.loss_parity([1.0], [float("nan")], rtol=1.0)["match"]


def test_explain_summary_counts_breaks_and_reasons():
    x = torch.randn(2, 3, 8, 8)
    broken = cl.explain_summary(cl.build_model("mlp_break", 8, hidden=16), x)
    assert broken["graph_breaks"] >= 1 and broken["graphs"] >= 2
    assert broken["reasons"] and "item" in broken["reasons"][0]["reason"]
    assert "compile_lab.py" in broken["reasons"][0]["where"]
    fixed = cl.explain_summary(cl.build_model("mlp_fixed", 8, hidden=16), x)
    assert fixed["graph_breaks"] == 0 and fixed["graphs"] == 1 and fixed["reasons"] == []


def test_break_and_fixed_variants_compute_the_same():
    torch.manual_seed(0)
    a = cl.build_model("mlp_break", 8, hidden=16)
    b = cl.build_model("mlp_fixed", 8, hidden=16)
    b.load_state_dict(a.state_dict())
    x = torch.randn(4, 3, 8, 8) * 50  # large enough for the clamp to act
    torch.testing.assert_close(a(x), b(x))


def test_eager_cell_metrics_and_seeded_losses():
    m1 = cl.run_cell("mlp", "fp32", "eager", 4, 3, **TINY)
    m2 = cl.run_cell("mlp", "fp32", "eager", 4, 3, **TINY)
    assert m1["steps_timed"] == 3 and len(m1["losses"]) == 4  # compile/warm-up step + timed steps
    assert m1["losses"] == m2["losses"]  # same seed, same data
    assert "compile_s" not in m1


def test_tiny_compiled_cell_matches_eager():
    eager = cl.run_cell("mlp", "fp32", "eager", 4, 3, **TINY)
    comp = cl.run_cell("mlp", "fp32", "default", 4, 3, backend="aot_eager", **TINY)
    assert comp["compile_s"] > 0 and comp["graphs"] == 1 and comp["graph_breaks"] == 0
    assert cl.loss_parity(eager["losses"], comp["losses"], rtol=1e-4, atol=1e-6)["match"]


def test_failed_compile_is_a_failed_row(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("inductor exploded")

    monkeypatch.setattr(torch, "compile", boom)
    res = Results("04_test", "smoke", {}, root=tmp_path)
    row = cl.record_cell(res, "mlp", "fp32", "default", 4, 2, **TINY)
    assert row["status"] == "failed"
    assert "torch.compile(mode='default') of mlp failed" in row["error"] and "inductor exploded" in row["error"]
    ok = cl.record_cell(res, "mlp", "fp32", "eager", 4, 2, **TINY)  # the matrix goes on
    assert ok["status"] == "ok"
    bad = cl.record_cell(res, "mlp", "fp32", "turbo", 4, 2, **TINY)
    assert bad["status"] == "failed" and "unknown compile mode" in bad["error"]


def test_summarise_speedup_parity_break_even():
    rows = [
        {"name": "e", "config": {"model": "m", "precision": "fp32", "mode": "eager", "batch_size": 4},
         "metrics": {"step_ms_median": 100.0, "step_ms_p25": 90.0, "step_ms_p75": 110.0, "losses": [2.0, 1.0]},
         "status": "ok", "error": None},
        {"name": "c", "config": {"model": "m", "precision": "fp32", "mode": "default", "batch_size": 4},
         "metrics": {"step_ms_median": 80.0, "step_ms_p25": 79.0, "step_ms_p75": 81.0, "losses": [2.0, 1.001],
                     "compile_s": 10.0}, "status": "ok", "error": None},
        {"name": "r", "config": {"model": "m", "precision": "fp32", "mode": "reduce-overhead", "batch_size": 4},
         "metrics": {}, "status": "failed", "error": "needs a GPU"},
    ]
    s = {r["cell"]: r for r in cl.summarise(rows, rtol=1e-2)}
    assert s["c"]["speedup"] == 1.25 and s["c"]["break_even_steps"] == 500 and s["c"]["loss_match"]
    assert s["e"]["speedup"] == 1.0 and "break_even_steps" not in s["e"]
    assert s["r"]["status"] == "failed" and s["r"]["error"] == "needs a GPU"


def test_compile_seconds_from_snapshots():
    before = {"_compile.compile_inner": 1.0}
    after = {"_compile.compile_inner": 3.5, "compile_fx.<locals>.bw_compiler": 0.5}
    assert cl.compile_seconds(before, after) == 3.0
    assert cl.compile_seconds({}, {}) is None


def test_use_inductor_cache_makes_an_empty_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unchanged")
    d = tmp_path / "cache"
    d.mkdir()
    (d / "old").write_text("x")
    p = cl.use_inductor_cache(d)
    assert p.exists() and not any(p.iterdir())
    import os

    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(d)


def test_interleaved_times_alternate_and_keep_step():
    keep = {}
    cl.run_cell("mlp", "fp32", "eager", 4, 2, keep=keep, **TINY)
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b"), "k": keep["step"]}
    t = timing.interleaved_times(fns, rounds=3)
    assert set(t) == {"a", "b", "k"} and all(len(v.times_ms) == 3 for v in t.values())
    assert calls == ["a", "b", "b", "a", "a", "b"]  # rotating start: a b k / b k a / k a b
    with pytest.raises(ValueError):
        timing.interleaved_times(fns, rounds=0)


def test_summarise_prefers_interleaved_medians():
    base = {"step_ms_median": 100.0, "step_ms_p25": 1, "step_ms_p75": 2, "losses": [1.0],
            "interleaved_ms_median": 50.0, "interleaved_ms_p25": 45.0, "interleaved_ms_p75": 55.0}
    comp = {**base, "interleaved_ms_median": 40.0, "compile_s": 1.0}
    rows = [{"name": n, "config": {"model": "m", "precision": "fp32", "mode": mo, "batch_size": 1},
             "metrics": m, "status": "ok", "error": None} for n, mo, m in [("e", "eager", base), ("c", "default", comp)]]
    s = {r["cell"]: r for r in cl.summarise(rows, rtol=1e-3)}
    assert s["c"]["speedup"] == 1.25 and s["c"]["break_even_steps"] == 100 and s["c"]["interleaved_ms"] == 40.0


def test_summarise_uses_the_same_windows_eager_median():
    base = {"step_ms_median": 100.0, "step_ms_p25": 1, "step_ms_p75": 2, "losses": [1.0], "interleaved_ms_median": 90.0,
            "interleaved_ms_p25": 89.0, "interleaved_ms_p75": 91.0}
    warm = {"step_ms_median": 10.0, "step_ms_p25": 1, "step_ms_p75": 2, "losses": [1.0], "compile_s": 1.0,
            "interleaved_ms_median": 40.0, "interleaved_ms_p25": 39.0, "interleaved_ms_p75": 41.0,
            "interleaved_eager_ms_median": 50.0}
    rows = [{"name": n, "config": {"model": "m", "precision": "fp32", "mode": mo, "batch_size": 1},
             "metrics": m, "status": "ok", "error": None} for n, mo, m in [("e", "eager", base), ("w", "default", warm)]]
    s = {r["cell"]: r for r in cl.summarise(rows, rtol=1e-3)}
    assert s["w"]["speedup"] == 1.25 and s["w"]["break_even_steps"] == 100
