"""Notebook 05's harness on planted steps (helpers.lessons.diagnose: ``run_case``) and helpers.measure.diagnose
(``diagnose_step``, ``training_step``): each planted CPU case is the doctor's top cause. The notebook writes its plants
in its cells; ``make_step`` here is a small stand-in with the same signature (also used by test_diagnose_lesson)."""
import time

import pytest
import torch

from helpers.lessons import diagnose as dx
from helpers.measure.diagnose import diagnose_step, training_step
from helpers.measure.timing import torch_threads
from helpers.notebook.results import Results

SCHEDULE = dict(wait=0, warmup=1, active=2)


class SlowSamples(torch.utils.data.Dataset):
    def __init__(self, ms):
        self.ms = ms

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        time.sleep(self.ms / 1000)
        return torch.randn(8), i % 3


def make_step(kind, size, item=True):
    """A stand-in for the notebook's ``planted_step`` (same signature): a linear model's training step with one plant,
run with 1 intra-op thread."""
    torch.manual_seed(0)
    model, big = torch.nn.Linear(8, 3), torch.randn(int(size), int(size)) if kind == "compute" else None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = (torch.utils.data.DataLoader(SlowSamples(size), batch_size=8) if kind == "input"
            else [(torch.randn(4, 8), torch.randint(0, 3, (4,)))])
    train = training_step(model, opt, data)

    def step():
        with torch_threads(1):   # as the notebook on a CPU: a busy machine's OpenMP wake-ups would bury the plant
            t = torch.ones(16)
            for _ in range(int(size) if kind == "launch/overhead" else 0):
                t = t * 1.0001
            if big is not None:
                (big @ big).sum()
            return train()
    return step


@pytest.mark.parametrize("kind,size", [("input", 2), ("launch/overhead", 2000), ("compute", 512)])
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
