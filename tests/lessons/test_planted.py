"""helpers.lessons.diagnose (notebook 05's planted bottlenecks) and helpers.measure.diagnose (``diagnose_step``,
``training_step``): each planted CPU case is the doctor's top cause."""
import pytest

from helpers.lessons.diagnose import planted_step
from helpers.measure.diagnose import diagnose_step, training_step


def _sum_ms(r):
    return sum(c["ms"] for c in r.causes if c["ms"] is not None)


@pytest.mark.parametrize("kind,size", [("input", 2), ("launch/overhead", 2000), ("compute", 768)])
def test_planted_cpu_case_top_cause(kind, size, tmp_path):
    r = diagnose_step(planted_step(kind, size), trace_root=tmp_path)
    assert r.top == kind, r.summary()
    assert not r.on_gpu and {"host sync", "GPU idle"} <= set(r.cannot_judge)
    assert _sum_ms(r) <= r.step_ms + 0.005  # causes are rounded to the µs
    assert list(r.trace_dir.glob("*.pt.trace.json*"))


def test_planted_refuses_bad_values():
    with pytest.raises(ValueError, match="unknown planted bottleneck"):
        planted_step("disk", 1)
    with pytest.raises(ValueError, match="positive"):
        planted_step("compute", -5)


def test_planted_host_sync_has_gpu_work_to_overlap_and_a_fix():
    """The host-sync plant: ``overlap`` adds a matrix product (GPU work the host work could overlap with, without
    which removing the sync saves nothing on a big GPU); ``item=False`` is the same step without the ``.item()``."""
    import torch

    def ops(**kw):
        step = planted_step("host sync", 0.1, **kw)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            step()
        return [e.key for e in p.key_averages()]

    planted, fixed, small = ops(overlap=96), ops(overlap=96, item=False), ops()
    assert "aten::item" in planted and "aten::item" not in fixed
    assert any(k in ("aten::mm", "aten::matmul") for k in planted) and not any(k == "aten::matmul" for k in small)
    with pytest.raises(ValueError, match="overlap"):
        planted_step("host sync", 1, overlap=-1)


def test_training_step_from_own_parts(tmp_path):
    import torch

    model = torch.nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(12, 8), torch.randint(0, 3, (12,)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    step = training_step(model, opt, loader)
    for _ in range(5):  # more steps than batches: the loader starts over
        step()
    r = diagnose_step(step, trace_root=tmp_path, wait=0, warmup=1, active=2)
    assert r.steps == 2 and r.ms("input") > 0


def test_sizes_have_both_scales():
    from helpers.notebook import sizes

    keys = {"batch_size", "features", "hidden", "input_ms", "tiny_ops", "matmul", "sync_ms", "wait",
            "warmup_steps", "active"}
    for scale in ("smoke", "full"):
        assert keys <= set(sizes.DIAGNOSE[scale])
        assert all(sizes.DIAGNOSE[scale][k] > 0 for k in keys - {"wait"})
