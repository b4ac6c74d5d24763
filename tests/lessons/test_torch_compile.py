"""helpers.lessons.torch_compile: one cell timed (first steps apart), Dynamo's bookkeeping, the break-even arithmetic,
explain on the article's models and the fresh-process starts (tiny steps, the aot_eager backend: no Inductor)."""
import os
import subprocess

import pytest
import torch
from torch import nn

from helpers.lessons import torch_compile as cl
from helpers.lessons.torch_compile import dynamo


def tiny_step(compiled=False, scaler=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    if compiled:
        model = torch.compile(model, backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, 2, 2), torch.tensor([0, 1, 2, 0])

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    step.scaler = scaler
    return step


def test_eager_cell_times_its_first_steps_apart_and_records_its_settings():
    torch._dynamo.reset()
    m = cl.experiment.run_cell(tiny_step(), steps=3, compile_steps=2, compiled=False)
    assert len(m["first_steps_ms"]) == 2 and m["first_steps_s"] > 0 and m["steps_timed"] == 3
    assert len(m["losses"]) == 5 and len(m["step_times_ms"]) == 3 and m["losses"][-1] < m["losses"][0]
    assert m["float32_matmul_precision"] in ("highest", "high", "medium") and m["fallback_random"] is False
    assert m["grad_scaler"] is False and "scaler_skipped_steps" not in m and "compile_s" not in m
    assert m["steady_peak_mem_mb"] is None  # a CPU keeps no peak counter


def test_compiled_cell_counts_its_graphs_and_compile_time():
    torch._dynamo.reset()
    m = cl.experiment.run_cell(tiny_step(compiled=True), steps=3, compile_steps=1)
    assert m["compile_s"] > 0 and m["graphs"] == 1 and m["graph_breaks"] == 0 and m["steady_graphs"] == 0
    assert m["first_steps_s"] >= m["compile_s"]
    assert {"cudagraph_skips", "fx_graph_cache_hits", "fx_graph_cache_misses"} <= set(m)


def test_fp16_cell_reports_the_steps_grad_scaler_skipped():
    class Scaler:  # GradScaler halves its scale (from 2**16) at each overflowing step
        def get_scale(self):
            return 2.0 ** 14

    m = cl.experiment.run_cell(tiny_step(scaler=Scaler()), steps=2, compile_steps=1, compiled=False)
    assert m["grad_scaler"] is True and m["scaler_skipped_steps"] == 2


def test_break_even_from_whole_run_time():
    assert cl.experiment.break_even_whole_run([100, 10], 10.0, [3000, 170], 8.0) == 2 + 1530  # ceil(3060/2)
    assert cl.experiment.break_even_whole_run([100, 10], 10.0, [90, 10], 9.0) == 2   # cheaper from the start
    assert cl.experiment.break_even_whole_run([100], 10.0, [3000], 12.0) == "never"


def test_compile_seconds_from_snapshots():
    t = cl.dynamo.COMPILE_TIMERS
    assert cl.dynamo.compile_seconds({t[0]: 1.0}, {t[0]: 3.5, t[1]: 0.5}) == 3.0
    assert cl.dynamo.compile_seconds({}, {}) is None
    assert isinstance(cl.dynamo.dynamo_times(), dict)


def test_graph_counters_report_cudagraph_skips():
    from torch._dynamo.utils import counters

    counters.clear()
    counters["inductor"]["cudagraph_skips"] += 2
    counters["stats"]["unique_graphs"] += 3
    g = cl.dynamo.graph_counters()
    assert g["cudagraph_skips"] == 2 and g["graphs"] == 3 and g["graph_breaks"] == 0
    counters.clear()


def test_use_inductor_cache_empties_the_folder_and_lets_triton_follow(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "old"))  # restored after the test
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "old" / "triton"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "stale").write_text("x")
    p = cl.use_inductor_cache(tmp_path / "c")
    assert p.is_dir() and not list(p.iterdir()) and os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(p)
    assert "TRITON_CACHE_DIR" not in os.environ


def test_explain_on_a_small_article_model_and_stochastic_depth():
    e = cl.explain_model("convnext_mini", 32)
    assert e["graphs"] >= 1 and e["graph_breaks"] == len(e["reasons"]) and e["ops"] > 0 and e["explain_s"] > 0
    swin = cl.article_model("swin_mini")
    assert any(type(m).__name__ == "StochasticDepth" for m in swin.modules())
    with pytest.raises(ValueError, match="unknown article model"):
        cl.article_model("resnet9000")


def test_fresh_processes_do_not_inherit_this_processs_triton_cache(tmp_path, monkeypatch):
    """On a GPU Inductor sets TRITON_CACHE_DIR (into this process's cache) at its first Triton kernel; a child that
    inherits it finds the kernels this process compiled, so its "cold" start is not cold."""
    seen = {}

    def fake_run(cmd, env=None, **kw):
        seen.update(env)
        return subprocess.CompletedProcess(cmd, 0, stdout='{"compile_s": 1.0}\n', stderr="")

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "parent" / "triton" / "0"))
    monkeypatch.setattr(dynamo.subprocess, "run", fake_run)
    out = dynamo.start_run(tmp_path / "child", image_size=8)
    assert seen["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "child") and "TRITON_CACHE_DIR" not in seen
    assert out["compile_s"] == 1.0 and out["process_s"] >= 0


def test_cold_warm_start_uses_one_emptied_cache_twice(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(dynamo, "start_run", lambda p, **kw: calls.append((p, sorted(p.iterdir()), kw)) or {"x": 1})
    d = tmp_path / "c"
    d.mkdir()
    (d / "stale").write_text("x")
    assert cl.cold_warm_start(d, image_size=8) == {"x_cold": 1, "x_warm": 1}
    assert calls[0][0] == calls[1][0] == d and calls[0][1] == [] and calls[0][2] == {"image_size": 8}


def test_fresh_process_failure_is_one_clear_line(tmp_path):
    with pytest.raises(RuntimeError, match=r"the fresh process failed \(exit 1\): KeyError: 'image_size'"):
        dynamo.start_run(tmp_path / "c", timeout=300)


def test_smoke_matrix_is_the_gated_mlp_on_one_thread_and_full_scale_interleaves():
    from helpers.notebook import sizes

    smoke, full = sizes.TORCH_COMPILE["smoke"], sizes.TORCH_COMPILE["full"]
    assert {c[0] for c in smoke["cells"]} == {"gated_mlp"} and smoke["profile"][0] == "gated_mlp"
    assert smoke["cpu_threads"] == 1 and smoke["interleave_rounds"] >= 20
    assert full["interleave_rounds"] > 0 and full["mlp_rounds"] > 0  # a GPU is timed in alternation too
    assert set(smoke["start_cell"]) == set(full["start_cell"]) == {"image_size", "hidden", "batch_size",
                                                                    "compile_steps"}
