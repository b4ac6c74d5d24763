"""The doctor's command line (issue 32 item 8): --version, the exit statuses in --help, the usage line naming the
command as invoked, bad arguments refused in one line, Ctrl-C one line and status 130, --json with schema_version
and verdict. (The report's 120 columns and first screen: test_doctor.test_every_real_trace's check_text.)"""
import json
import sys

import pytest

from perf_doctor import cli as doctor, report
from tests import fake_trace as ft


@pytest.fixture
def trace(tmp_path):
    evs = [ft.step(k, 1000.0 * k, 900.0) for k in range(3)]
    for k in range(3):
        evs += [ft.runtime("cudaLaunchKernel", 1000.0 * k + 10, 5, corr=k),
                ft.kernel("gemm", 1000.0 * k + 20, 600.0, corr=k)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(ft.doc(*evs)))
    return p


def test_version(capsys):
    with pytest.raises(SystemExit) as ex:
        doctor.main(["--version"])
    assert ex.value.code == 0
    out = capsys.readouterr().out.split()
    assert out[-1] == doctor.version() and out[-1][0].isdigit()


@pytest.mark.parametrize("argv0, name", [("/venv/bin/perf-doctor", "perf-doctor"),
                                         ("/x/perf_doctor/__main__.py", "python -m perf_doctor")])
def test_help_names_the_command_and_the_exit_codes(monkeypatch, capsys, argv0, name):
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit):
        doctor.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith(f"usage: {name} ")
    for code in ("0 the report", "1 compare --fail-if-slower", "2 bad input", "3 compare", "130 interrupted"):
        assert code in out, code


@pytest.mark.parametrize("args", [["--top", "0"], ["--top", "-1"], ["--max-mb", "0"], ["--top", "x"]])
def test_bad_arguments_one_line_exit_2(capsys, trace, args):
    with pytest.raises(SystemExit) as ex:
        doctor.main([str(trace), *args])
    err = capsys.readouterr().err.strip()
    assert ex.value.code == 2 and len(err.splitlines()) == 1 and args[0] in err, err


def test_ctrl_c_is_one_line_and_130(monkeypatch, capsys, trace):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(doctor, "report", interrupted)
    assert doctor.main([str(trace)]) == 130
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "interrupted" in err and "Traceback" not in err


def test_json_has_schema_version_and_verdict(trace):
    rep = doctor.report(trace, views=False)
    doc = json.loads(doctor.json_report(rep))
    assert doc["schema_version"] == report.SCHEMA_VERSION and list(doc)[:2] == ["schema_version", "verdict"]
    assert "Top cause: compute" in doc["verdict"] and "ms per step" in doc["verdict"]


def test_table_fits_and_shortens_names():
    import pandas as pd
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(" + "int, " * 200 + ")"
    df = pd.DataFrame({"name": [long, "gemm"], "calls": [3, 4], "total_ms": [1.23456789, 0.000123],
                       "empty": [float("nan")] * 2})
    lines = report.table(df, 10).splitlines()
    assert len(lines) == 3 and max(map(len, lines)) <= 120 and "empty" not in lines[0]
    assert "1.23" in lines[1] and "1.2345" not in lines[1] and "vectorized_elementwise_kernel" in lines[1]


def test_idle_causes_reuse_the_diagnosis_split(monkeypatch, trace):
    """gaps.idle_causes refines the diagnosis' own split (Diagnosis.split) instead of splitting the steps again."""
    from perf_doctor import gaps

    def again(*a, **kw):
        raise AssertionError("split_gpu run a second time")
    d = report.dg.diagnose(json.loads(trace.read_text()))
    monkeypatch.setattr(gaps, "split_gpu", again)
    res = gaps.idle_causes(json.loads(trace.read_text()), split=d.split)
    assert res["idle_ms"] == pytest.approx(sum(c["ms"] for c in res["causes"]), abs=0.01)
    assert res["idle_ms"] == pytest.approx(0.3, abs=0.01)      # 900 µs steps, 600 µs kernels


def test_without_the_view_libraries_one_note_says_how_to_get_them(monkeypatch, capsys, trace, tmp_path):
    """The base install (``pip install ./doctor``: no torch-tb-profiler, no HTA): the answer first as ever, the
    doctor's own GPU figures, and one note naming perf-doctor[full] in place of each library's failure; the operator
    and kernel tables say why they are not shown. A CPU trace's note leaves HTA out (it has no GPU to cross-check)."""
    from perf_doctor.views import FULL

    for module in ("torch_tb_profiler", "hta"):
        monkeypatch.setitem(sys.modules, module, None)   # as if not installed (importlib.util.find_spec: None)
    rep = doctor.report(trace)
    said = [n for n in rep["notes"] if FULL in n]
    assert len(said) == 1 and "Overview" in said[0] and "HTA's cross-check" in said[0], rep["notes"]
    assert not [n for n in rep["notes"] if "not installed" in n or "ModuleNotFound" in n], rep["notes"]
    assert rep["overview"] is None and rep["gpu"]["source"] == "doctor"
    text = doctor.text_report(rep)
    assert text.splitlines()[1].startswith("Step: ") and "GPU (doctor, full precision" in text and "cross-check, doctor" in text
    flat = " ".join(text.split())   # (a long line is wrapped at 120 columns)
    assert "Operators: not shown (" in flat and "torch-tb-profiler is not installed" in flat
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(ft.doc(*[ft.step(k, 1000.0 * k, 900.0) for k in range(3)],
                                     *[ft.op("aten::mm", 1000.0 * k + 10, 500.0) for k in range(3)])))
    notes = [n for n in doctor.report(cpu)["notes"] if FULL in n]
    assert len(notes) == 1 and "HTA" not in notes[0]
