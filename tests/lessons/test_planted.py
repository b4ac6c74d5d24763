"""Notebook 05's harness on planted steps (helpers.lessons.diagnose: ``run_case``), ``diagnose_step``
(helpers.measure.profiling) and ``training_step`` (helpers.measure.training): each planted CPU case is the doctor's top
cause. The notebook writes its plants in its cells; ``tests/planted.py``'s ``make_step`` stands in for them."""
import pytest
import torch

from helpers.lessons import diagnose as dx
from helpers.measure.profiling import diagnose_step
from helpers.measure.training import training_step
from helpers.notebook.results import Results
from tests.planted import make_step

SCHEDULE = dict(wait=0, warmup=1, active=2)


# compute at 1024 (a ~25 ms product): at 512 (3 ms) a unit phase on three workers once read the Python between
# ops (wall time under contention) as larger, and named launch/overhead
@pytest.mark.parametrize("kind,size", [("input", 2), ("launch/overhead", 2000), ("compute", 1024)])
def test_planted_cpu_case_top_cause(kind, size, tmp_path, monkeypatch):
    monkeypatch.setenv("PERF_RUNS_DIR", str(tmp_path / "runs"))
    res = Results("05_diagnose", "smoke", root=tmp_path / "results")
    r = dx.run_case(res, make_step, kind, size, device="cpu", **SCHEDULE)
    assert r is not None and r.top == kind, r.summary()
    assert not r.on_gpu and {"host sync", "GPU idle"} <= set(r.cannot_judge)
    assert sum(c["ms"] for c in r.causes if c["ms"] is not None) <= r.step_ms + 0.005  # rounded to the µs
    assert list(r.trace_dir.glob("*.pt.trace.json*"))
    assert res.get(dx.case_name(kind, size))["metrics"]["top_cause"] == kind


def test_training_step_from_own_parts(tmp_path):
    model = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(12, 8), torch.randint(0, 3, (12,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    step = training_step(model, opt, loader)
    for _ in range(5):  # more steps than batches: the loader starts over
        step()
    r = diagnose_step(step, trace_root=tmp_path, **SCHEDULE)
    assert r.steps == 2 and r.ms("input") > 0


def test_sizes_have_both_scales():
    from helpers.notebook import sizes

    keys = {"batch_size", "features", "hidden", "input_ms", "tiny_ops", "matmul", "sync_ms", "wait",
            "warmup_steps", "active"}
    for scale in ("smoke", "full"):
        assert keys <= set(sizes.DIAGNOSE[scale])
        assert all(sizes.DIAGNOSE[scale][k] > 0 for k in keys - {"wait"})
