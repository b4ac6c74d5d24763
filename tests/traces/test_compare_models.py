"""``compare`` on two CPU traces (issue 44 item 7): a CPU trace has no kernel names, and two models that share a loss
and an optimizer share most operator names; what tells them apart is each operator's calls per step (layers,
parameter counts). Two models: not comparable, exit status 3. One model at two speeds: comparable."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fake_trace import doc, op, step
from perf_doctor import compare_traces, cli
from perf_doctor.compare import CALLS_SIMILAR

ROOT = Path(__file__).resolve().parents[2]
SHARED_OPS = ["aten::mse_loss", "aten::zero_", "aten::sum", "aten::mean", "aten::ones_like", "aten::copy_"]


def _model(layers: list[str], params: int, scale: float, steps: int = 5) -> dict:
    """A CPU training step: the model's forward ops, the shared loss, its backward, and an optimizer op per
    parameter (SGD: ``aten::add_`` on each), each op 100 µs x ``scale``."""
    events, t = [], 0.0
    for k in range(1, steps + 1):
        names = layers + SHARED_OPS + [f"{n}_backward" for n in layers] + ["aten::add_"] * params
        dur = 100.0 * scale
        events.append(step(k, t, dur * len(names) + 10))
        for i, n in enumerate(names):
            events.append(op(n, t + 5 + i * dur, dur * 0.9))
        t += dur * len(names) + 20
    return doc(*events)


MLP = (["aten::linear", "aten::addmm", "aten::relu"] * 2, 4)
CNN = (["aten::conv2d", "aten::convolution", "aten::batch_norm", "aten::relu"] * 4 + ["aten::linear", "aten::addmm"],
       26)


def _write(tmp_path: Path, name: str, trace: dict) -> Path:
    p = tmp_path / f"{name}.pt.trace.json"
    p.write_text(json.dumps(trace))
    return p


def test_two_cpu_models_sharing_loss_and_optimizer_are_not_comparable(tmp_path):
    a = _write(tmp_path, "mlp", _model(*MLP, 1.0))
    b = _write(tmp_path, "cnn", _model(*CNN, 1.0))
    cmp = compare_traces(a, b)
    able = cmp["comparability"]
    assert able["ops_jaccard"] >= 0.5, able  # the names alone would call them comparable
    assert able["verdict"] == "not comparable" and able["calls_jaccard"] < CALLS_SIMILAR, able
    assert any("calls per step" in r for r in able["reasons"]), able["reasons"]
    run = subprocess.run([sys.executable, "-m", "perf_doctor", "compare", str(a), str(b), "--fail-if-slower", "5"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == cli.EXIT_NOT_COMPARABLE, (run.returncode, run.stderr)


def test_one_cpu_model_at_two_speeds_stays_comparable(tmp_path):
    a = _write(tmp_path, "before", _model(*MLP, 1.0))
    b = _write(tmp_path, "after", _model(*MLP, 0.7))
    able = compare_traces(a, b)["comparability"]
    assert able["verdict"] == "comparable" and able["calls_jaccard"] > 0.95, able
