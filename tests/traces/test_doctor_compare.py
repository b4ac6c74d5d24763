"""``python -m perf_doctor compare BEFORE AFTER``: the notebooks' comparison (``compare_times``: ratio, 95% BCa
interval, measured floor, verdict) on the two sides' step times, each cause's change in ms, an exit status for CI.
On a trace against itself and two halves of one run (no difference), on a planted fix of notebook 05 (faster, and
which cause), the other way round (slower; --fail-if-slower), and on one step a side (cannot tell: the gate
fails)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.measure.profiling import diagnose_step
from perf_doctor import stats as cmp_
from perf_doctor import compare as comparison
from perf_doctor import events as ev
from perf_doctor.load import load_trace
from tests.shared_data import gpu_trace
from tests.planted import make_step

ROOT = Path(__file__).resolve().parents[2]


def cli_process(*args):
    """``python -m perf_doctor compare ARGS`` as a user types it, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "perf_doctor", "compare", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


def cli(*args):
    """The same command's ``main`` in this process (its exit status, stdout and stderr), without a fresh
    interpreter's imports each time (~2-3 s each; these tests call it about twenty times). ``cli_process`` checks
    once that the command itself answers the same way."""
    import contextlib
    import io

    from perf_doctor import cli as command

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = command.main(["compare", *map(str, args)])
        except SystemExit as exc:   # argparse's refusals
            rc = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(["compare", *map(str, args)], rc, out.getvalue(), err.getvalue())


def steps_of(doc, first, last, path):
    """Steps ``first``..``last`` (0-based) of a trace, written to ``path``: the events that start from the first
    one's start until the next step's start, and the device work launched from among them."""
    starts = [a for _, a, _ in ev.step_ranges(doc)]
    lo = starts[first]
    hi = starts[last + 1] if last + 1 < len(starts) else float("inf")
    kept = [e for e in doc["traceEvents"] if not isinstance(e.get("ts"), (int, float)) or lo <= e["ts"] < hi]
    launched = set(ev.launches(ev.complete({"traceEvents": kept})))
    kept += [e for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float)) and e["ts"] >= hi
             and ev.is_device_work(e) and ev.corr(e) in launched]
    path.write_text(json.dumps({**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": kept}))
    return path


def test_the_interval_is_welchs():
    change, low, high = comparison.interval([10.0, 11.0, 12.0], [8.0, 8.5, 9.0])
    assert change == pytest.approx(-2.5)
    # se = sqrt(1/3 + 0.25/3) = 0.6455; Welch df = 2.94; t(0.975, 2.94) = 3.20
    assert low == pytest.approx(-2.5 - 3.20 * 0.6455, abs=0.02)
    assert high == pytest.approx(-2.5 + 3.20 * 0.6455, abs=0.02)
    assert comparison.interval([1.0], [2.0, 3.0])[1:] == (None, None)


def _synthetic(tmp_path, name, ms, jitter):
    """A GPU trace of 6 steps of ``ms`` ms (+/- jitter), a kernel taking 60% of each."""
    evs = []
    t = 0.0
    for k in range(6):
        d = (ms + jitter[k % len(jitter)]) * 1000
        evs += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": t, "dur": d, "pid": 1,
                 "tid": 1},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 5, "dur": 5, "pid": 1,
                 "tid": 1, "args": {"correlation": k}},
                {"ph": "X", "cat": "kernel", "name": "gemm", "ts": t + 20, "dur": 0.6 * d, "pid": 0, "tid": 7,
                 "args": {"correlation": k, "stream": 7}}]
        t += d
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": evs}))
    return path


def test_a_trace_against_itself_is_no_difference_in_the_notebooks_terms(tmp_path):
    path = _synthetic(tmp_path, "run.json", 10.0, [0.0, 0.4, -0.3, 0.2, -0.1, 0.3])
    cmp = comparison.compare_traces(path, path)
    assert cmp["verdict"] == "no difference" and cmp["ratio"] == 1.0 and cmp["low"] < 1 < cmp["high"]
    assert cmp["floor"] > 0 and cmp["floor_from"].startswith("A/A split")       # 6 steps a side: measured
    c = cmp["comparison"]
    assert (c["a"], c["b"], c["role"], c["metric"]) == ("before", "after", "change", "step_ms_mean")
    assert len(c["samples"]["a"]) == 6 and c["samples"]["a"] == c["samples"]["b"]
    assert cmp["summary"].startswith(cmp_.describe(c)) and "no difference" in cmp["summary"]
    assert all(r["change_ms"] == 0 for r in cmp["causes"]) and cmp["cause"] is None
    text = comparison.compare_text(cmp)
    assert "verdict: no difference" in text and "noise floor ±" in text


def test_two_halves_of_one_run_are_no_difference(tmp_path):
    whole = load_trace(_synthetic(tmp_path, "run.json", 10.0, [0.0, 0.4, -0.3, 0.2, -0.1, 0.3]))
    a, b = steps_of(whole, 0, 2, tmp_path / "a.json"), steps_of(whole, 3, 5, tmp_path / "b.json")
    p = cli(a, b, "--json")
    assert p.returncode == 0, p.stderr
    cmp = json.loads(p.stdout)
    assert cmp["verdict"] == "no difference" and cmp["steps"] == [3, 3] and cmp["cause"] is None
    assert cmp["low"] <= 1 <= cmp["high"] and cmp["step"]["low_ms"] <= 0 <= cmp["step"]["high_ms"]
    assert cmp["floor"] == 0.035 and cmp["floor_from"].startswith("assumed")   # 3 steps a side: no A/A split
    assert any("fewer than 4 steps a side" in n for n in cmp["notes"])


def test_two_halves_of_a_real_a100_run_are_no_difference_or_small(tmp_path):
    """3 steps a side (76.2 vs 78.8 ms): the bootstrap over so few steps is narrow (1.03 [1.01, 1.06]; Welch's
    interval of the change, -2.5 to +7.6 ms, would not resolve it), so with no floor to measure the 3.5% small-change
    size stands in and the verdict is "no difference"; a note says why; a 5% gate passes."""
    whole = load_trace(gpu_trace("hta_control.json.gz"))
    a, b = steps_of(whole, 0, 2, tmp_path / "a.json"), steps_of(whole, 3, 5, tmp_path / "b.json")
    p = cli(a, b, "--json", "--fail-if-slower", "5")
    assert p.returncode == 0, p.stderr
    cmp = json.loads(p.stdout)
    assert cmp["verdict"] == "no difference" and cmp["steps"] == [3, 3]
    assert any("fewer than 4 steps a side" in n for n in cmp["notes"])
    assert {r["cause"] for r in cmp["causes"]} >= {"compute", "communication", "host sync"}


def test_one_step_a_side_is_inconclusive_and_the_gate_fails(tmp_path):
    whole = load_trace(_synthetic(tmp_path, "run.json", 10.0, [0.0, 0.4]))
    a, b = steps_of(whole, 0, 0, tmp_path / "a.json"), steps_of(whole, 1, 5, tmp_path / "b.json")
    cmp = comparison.compare_traces(a, b)
    assert cmp["verdict"] == "inconclusive" and cmp["steps"] == [1, 5] and cmp["comparison"] is None
    assert "fewer than 3 a side" in cmp["comparability"]["reasons"][0]
    p = cli(a, b)
    assert p.returncode == 3 and "verdict: inconclusive" in p.stdout and "fewer than 3 a side" in p.stderr
    forced = comparison.compare_traces(a, b, force=True)
    assert forced["verdict"] == "cannot tell" and forced["low"] is None and forced["ratio"] > 0
    assert "fewer than 2" in forced["notes"][-2] and "--force" in forced["notes"][-1]
    gate = cli(a, b, "--fail-if-slower", "50", "--force")
    assert gate.returncode == 1 and "cannot tell" in gate.stdout and "gate fails" in gate.stderr
    assert cli(a, b, "--force").returncode == 0                                  # no limit asked: a report only


@pytest.fixture(scope="module")
def planted_fix(tmp_path_factory):
    """A planted input bottleneck (``tests/planted.py``: a dataset costing 4 ms a sample, 8 samples a batch,
    as notebook 05 plants it) and its fix (the plain step): the trace folders diagnose_step wrote. 10 steps a side and a ~32 ms effect: under a loaded CI
    machine one stalled step among 5, with a 2 ms-a-sample plant, widened the step's interval past 0 (the input
    cause alone still resolved)."""
    root = tmp_path_factory.mktemp("planted")
    before = diagnose_step(make_step("input", 4.0), trace_root=root / "before", active=10).trace_dir
    after = diagnose_step(make_step("none", 0), trace_root=root / "after", active=10).trace_dir
    return before, after


def test_a_planted_fix_is_faster_and_names_its_cause(planted_fix):
    before, after = planted_fix
    p = cli(before, after, "--json", "--fail-if-slower", "5")
    assert p.returncode == 0, p.stderr
    cmp = json.loads(p.stdout)
    assert cmp["verdict"] == "faster" and cmp["cause"] == "input"
    assert cmp["ratio"] > 1 and cmp["low"] > 1 and cmp["ratio"] >= 1 + cmp["floor"]
    row = next(r for r in cmp["causes"] if r["cause"] == "input")
    assert row["change_ms"] < -5 and row["high_ms"] < 0 and cmp["step"]["high_ms"] < 0
    text = cli(before, after)
    lines = text.stdout.splitlines()
    assert text.returncode == 0 and lines[3] == "verdict: faster" and "the cause that moved most: input" in lines[4]
    assert lines[4].startswith("after takes ") and "): faster; " in lines[4]       # compare.describe's words


def test_slower_sets_the_exit_status_for_ci(planted_fix):
    before, after = planted_fix
    p = cli_process(after, before, "--fail-if-slower", "5")   # the change undone: slower (the command itself)
    assert p.returncode == 1 and "verdict: slower" in p.stdout and "slower by" in p.stderr
    assert cli(after, before, "--fail-if-slower", "100000").returncode == 0   # slower, but not by that much
    assert cli(after, before).returncode == 0                                  # no limit asked: a report only


def test_bad_input_on_either_side_is_one_line(tmp_path, planted_fix):
    p = cli(planted_fix[0], tmp_path / "missing.json")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "missing.json" in p.stderr


def _model(tmp_path, name, ops, kernels=None, n=6, device=None):
    """A trace of ``n`` 10 ms steps running the operators ``ops`` (each with a kernel named from ``kernels``)."""
    from tests import fake_trace as ft

    evs, t, c = [], 0.0, 0
    for k in range(n):
        evs.append(ft.step(k, t, 10000 + 50 * (k % 3)))
        for j, op in enumerate(ops):
            a = t + 100 + j * 1000
            evs.append(ft.op(op, a, 800))
            if kernels:
                evs += [ft.runtime("cudaLaunchKernel", a + 10, 5, corr=c),
                        ft.kernel(kernels[j % len(kernels)], a + 20, 700, corr=c)]
                c += 1
        t += 10000 + 50 * (k % 3)
    top = {"deviceProperties": [{"id": 0, "name": device}]} if device else {}
    path = tmp_path / name
    path.write_text(json.dumps(ft.doc(*evs, **top)))
    return path


def test_two_different_models_exit_3_with_reasons(tmp_path):
    """01's small CNN against 04's gated MLP said "NO CHANGE: 8.07 -> 10.13 ms (+25.4%)": other operators, other
    kernels, another device are not comparable."""
    cnn = _model(tmp_path, "cnn.json", ["aten::conv2d", "aten::relu", "aten::max_pool2d", "aten::linear"],
                 ["implicit_gemm", "relu_kernel"], device="NVIDIA H100 80GB HBM3")
    mlp = _model(tmp_path, "mlp.json", ["aten::linear", "aten::silu", "aten::mul", "aten::layer_norm"],
                 ["sm90_gemm", "silu_kernel"], device="NVIDIA H100 80GB HBM3")
    p = cli(cnn, mlp, "--json")
    assert p.returncode == 3, p.stderr
    cmp = json.loads(p.stdout)
    assert cmp["verdict"] == "not comparable" and cmp["comparability"]["ops_jaccard"] < 0.5
    assert "different operators" in p.stderr and "--force" in p.stderr
    assert "not comparable" in cmp["summary"] and "no difference" not in cmp["summary"]
    cpu = _model(tmp_path, "cpu.json", ["aten::conv2d", "aten::relu", "aten::max_pool2d", "aten::linear"])
    other = _model(tmp_path, "a100.json", ["aten::conv2d", "aten::relu", "aten::max_pool2d", "aten::linear"],
                   ["implicit_gemm", "relu_kernel"], device="NVIDIA A100-SXM4-40GB")
    p = cli(cnn, cpu, "--fail-if-slower", "5")
    assert p.returncode == 3 and "empty capture is not an improvement" in p.stderr
    p = cli(cnn, other)
    assert p.returncode == 3 and "different devices" in p.stderr
    assert cli(cnn, mlp, "--force").returncode == 0


def test_an_empty_capture_is_not_an_improvement(tmp_path):
    full = _model(tmp_path, "full.json", ["aten::linear", "aten::relu"])
    empty = _model(tmp_path, "empty.json", [])
    p = cli(full, empty)
    assert p.returncode == 3 and "recorded no operator" in p.stderr and "verdict: not comparable" in p.stdout


def test_the_same_job_twice_is_comparable_and_no_difference(tmp_path):
    a = _model(tmp_path, "a.json", ["aten::linear", "aten::relu"], ["gemm", "relu"], device="NVIDIA H100 80GB HBM3")
    p = cli(a, a, "--json", "--fail-if-slower", "5")
    assert p.returncode == 0, p.stderr
    cmp = json.loads(p.stdout)
    assert cmp["verdict"] == "no difference" and cmp["comparability"]["verdict"] == "comparable"
    assert cmp["comparability"]["ops_jaccard"] == 1.0 and cmp["comparability"]["reasons"] == []


def test_two_models_of_the_h100_reference_are_not_comparable():
    """The H100 reference: notebook 01's CNN and 05's plain linear step share 53% of their operator names but 19%
    of their kernel names."""
    from tests.replay.conftest import h100_trace

    cmp = comparison.compare_traces(h100_trace("01_profiler_basics", "train_step"), h100_trace("05_diagnose", "none"))
    assert cmp["verdict"] == "not comparable" and "different kernels" in cmp["comparability"]["reasons"][0]
