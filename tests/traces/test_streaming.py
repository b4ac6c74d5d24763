"""perf_doctor.stream.read_trimmed: the doctor's streamed reader keeps what ``trim(load_trace(path))`` keeps, in
memory that follows the steps kept, not the file (issue 32 item 7); Kineto's unescaped quotes; progress on a terminal's stderr."""
import gzip
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perf_doctor import load, stream
from perf_doctor.files import find_trace

from tests import fake_trace as ft
from tests.shared_data import gpu_trace, other_trace

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "data" / "reference" / "h100"


def _same(path: Path, max_steps=load.MAX_STEPS, max_events=load.MAX_EVENTS, keep_mb=0.0) -> tuple[dict, str]:
    """read_trimmed against trim(load_trace): the same document (header, events in order) and the same note."""
    want, want_note = load.trim(load.load_trace(path), max_steps, max_events)
    got, note, notes = stream.read_trimmed(path, max_steps, max_events, keep_mb=keep_mb)
    assert note == want_note and notes == []
    assert got == want or json.dumps(got) == json.dumps(want)   # (NaN is not equal to itself)
    return got, note


@pytest.mark.parametrize("where", ["gpu:hta_alexnet.json.gz", "gpu:hta_ns_resolution.json.gz",
                                   "other:kineto_resnet50_nw0", "h100:05_diagnose/traces/05_diagnose_host_sync"])
def test_streamed_reading_keeps_what_trim_keeps_on_real_traces(where):
    kind, name = where.split(":")
    if kind == "h100":
        path = H100 / name
        if not path.exists():
            pytest.skip(f"{path} is absent")
    else:
        path = gpu_trace(name) if kind == "gpu" else other_trace(name)
    path, _ = find_trace(path)
    doc, note = _same(path, max_steps=2)             # two passes, cut to 2 steps (when the trace has more)
    steps = load.ev.step_ranges(doc)
    assert len(steps) <= 2 and (note is None or "the first" in note)


def test_the_second_pass_decodes_only_the_chunks_it_needs(tmp_path, monkeypatch):
    """Chunks of 2 KiB: the second pass passes over the chunks that hold nothing trim keeps, and keeps the same."""
    path = tmp_path / "long.json"
    doc = _synthetic(60)   # without its launch of a string correlation id (which makes any device work late work)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if (e.get("args") or {}).get("correlation") != "s0"]
    path.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(load, "CHUNK", 2048)
    monkeypatch.setattr(stream, "CHUNK", 2048)
    decoded = []
    real = stream._Events._batch

    def batch(self, buf):
        out = real(self, buf)
        decoded.append((self.plan is not None, len(out[0])))
        return out
    monkeypatch.setattr(stream._Events, "_batch", batch)
    for steps in (3, 20, None):
        decoded.clear()
        _same(path, steps, None)
        first = sum(1 for second, n in decoded if not second and n)
        second = sum(1 for second, n in decoded if second and n)
        assert first >= 10 and (second < first / 3 if steps == 3 else second <= first), (steps, first, second)


def _synthetic(n_steps: int = 6) -> dict:
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
           {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "args": {"correlation": "s0"}},  # no time
           ft.runtime("cudaMemcpyAsync", float("nan"), corr=77),          # an impossible time
           {"ph": "X", "cat": "kernel", "name": "late_s0", "ts": 10_000, "dur": 1, "args": {"correlation": "s0"}}]
    for i in range(n_steps):
        t0 = i * 100
        evs += [ft.label(f"ProfilerStep#{i}", t0, 90), ft.op("aten::mm", t0 + 5, 70),
                ft.runtime("cudaLaunchKernel", t0 + 80, 1, corr=i),
                ft.kernel("gemm", t0 + 105, 10, corr=i),                  # runs in the next step: kept with its launch
                {"ph": "i", "name": "marker", "ts": t0 + 1, "s": "t"}]
    evs.append(ft.kernel("orphan", 5_000, 3, corr=999))                   # launched by nothing kept
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100"}], "traceEvents": evs,
            "traceName": "synthetic", "displayTimeUnit": "ms"}


@pytest.mark.parametrize("form", ["object", "gzip", "bare array", "indented"])
def test_streamed_reading_keeps_what_trim_keeps_on_synthetic_traces(tmp_path, form):
    doc = _synthetic()
    text = json.dumps(doc["traceEvents"] if form == "bare array" else doc, indent=2 if form == "indented" else None)
    path = tmp_path / ("t.json.gz" if form == "gzip" else "t.json")
    path.write_bytes(gzip.compress(text.encode()) if form == "gzip" else text.encode())
    for steps, events in ((10, 400_000), (3, 400_000), (5, 7), (None, None)):
        for keep in (0.0, 64.0):
            got, note = _same(path, steps, events, keep)
    got, note = _same(path, 3, None)
    kernels = [e["name"] for e in got["traceEvents"] if e.get("cat") == "kernel"]
    assert sorted(kernels) == ["gemm"] * 3 + ["late_s0"] and "holds 6 ProfilerSteps" in note
    if form != "bare array":
        assert got["traceName"] == "synthetic" and got["deviceProperties"][0]["name"] == "H100"


QUOTED = 'torch/_dynamo/eval_frame.py(600): _fn "compiled" "graph" 3'


def _quote_bug_trace(path: Path, name: str = QUOTED) -> Path:
    """A trace as Kineto wrote it before its July 2026 fix: a with_stack frame name with bare quotes inside."""
    evs = [ft.label(f"ProfilerStep#{i}", i * 100, 90) for i in range(4)]
    evs += [{"ph": "X", "cat": "python_function", "name": "PLACEHOLDER", "ts": 5 + 100 * i, "dur": 2, "pid": 1,
             "tid": 1, "args": {"Python id": i}} for i in range(4)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": evs}, indent=1)
    path.write_text(text.replace('"PLACEHOLDER"', f'"{name}"'))
    with pytest.raises(json.JSONDecodeError):
        json.loads(path.read_text())
    return path


def test_event_names_with_kinetos_unescaped_quotes_are_repaired(tmp_path):
    path = _quote_bug_trace(tmp_path / "bug.json")
    whole = load.load_trace(path)
    assert [e["name"] for e in whole["traceEvents"] if e["cat"] == "python_function"] == [QUOTED] * 4
    for keep in (0.0, 64.0):
        doc, note, notes = stream.read_trimmed(path, 2, keep_mb=keep)
        assert [e["name"] for e in doc["traceEvents"] if e["cat"] == "python_function"] == [QUOTED] * 2
        assert "first 2" in note and len(notes) == 1 and "unescaped quotes" in notes[0] and "4 event name" in notes[0]


def test_a_quote_bug_that_cannot_be_repaired_is_refused_in_one_line(tmp_path):
    path = _quote_bug_trace(tmp_path / "worse.json", name='frame "a", "b": c')   # inner text that reads as a key
    for read in (load.load_trace, lambda p: stream.read_trimmed(p, keep_mb=0)):
        with pytest.raises(load.TraceError) as e:
            read(path)
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and "unescaped quotes" in msg and "July 2026" in msg


def test_damaged_and_odd_files_get_the_whole_readers_messages(tmp_path):
    good = json.dumps(_synthetic())
    cases = {"cut.json": good[: len(good) // 2], "extra.json": good + " {}", "other.json": '{"lr": 0.1, "x": [1]}',
             "notlist.json": '{"traceEvents": 5}', "empty.json": "", "nothing.json": '{"traceEvents": []}',
             "scalars.json": '{"traceEvents": [1, 2, {"ph": "X", "ts": 1, "dur": 1}]}'}
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text)
        try:
            want = load.trim(load.load_trace(p))
        except load.TraceError as exc:
            want = str(exc).split(" (")[0].split(";")[0]
        try:
            got = stream.read_trimmed(p, keep_mb=0)[:2]
        except load.TraceError as exc:
            got = str(exc).split(" (")[0].split(";")[0]
        assert got == want, name
        if isinstance(want, str):
            assert str(p) in want


def test_over_the_limit_the_message_says_what_the_limit_guards(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_synthetic()) + " " * (2 << 20))
    monkeypatch.setenv("PERF_TRACE_MAX_MB", "1")
    for read, guards in ((load.load_trace, "memory"), (lambda p: stream.read_trimmed(p, keep_mb=0), "time")):
        with pytest.raises(load.TraceError, match=f"more than 1 MiB, the doctor's reading limit, which .*{guards}"):
            read(path)
    monkeypatch.delenv("PERF_TRACE_MAX_MB")
    assert load.max_trace_bytes(streamed=True) >= 2 * load.max_trace_bytes() >= 2**30 // 2
    assert load.max_trace_bytes(streamed=True) >= 2**31   # a 1 GB trace is read by default


class _Terminal(io.StringIO):
    """A stream that says it is a terminal, as the command line's stderr is in a shell."""

    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_only(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_synthetic()))
    monkeypatch.setattr(stream, "PROGRESS_AFTER_S", 0.0)
    stream.read_trimmed(path, keep_mb=0)     # no stream given: nothing shown
    log, term = io.StringIO(), _Terminal()
    with stream.progress_to(log):
        stream.read_trimmed(path, keep_mb=0)
    assert log.getvalue() == ""              # a log or a pipe: no progress in it
    with stream.progress_to(term):
        stream.read_trimmed(path, keep_mb=0)
    drawn = term.getvalue()
    assert "reading t.json: " in drawn and "reading t.json (second pass): " in drawn and "B/s]" in drawn   # tqdm's
    assert drawn.rsplit("\r", 1)[-1].strip() == "" and "\n" not in drawn   # each bar cleared at the read's end


def test_the_command_shows_progress_on_a_terminal_and_its_json_stays_clean(tmp_path):
    """``--json`` on stdout stays one JSON document; the bar goes to stderr when stderr is a terminal (a pty here),
    and a piped stderr gets none."""
    import fcntl
    import pty
    import struct
    import termios

    path = tmp_path / "t.json"
    path.write_text(json.dumps(_synthetic()))
    code = ("import sys; from perf_doctor import stream; stream.PROGRESS_AFTER_S = 0.0; "
            "from perf_doctor.cli import main; sys.exit(main([sys.argv[1], '--json']))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    piped = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=120)
    assert piped.returncode == 0, piped.stderr[-500:]
    assert json.loads(piped.stdout)["steps"] >= 1 and "reading" not in piped.stderr
    main, term = pty.openpty()
    fcntl.ioctl(term, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))   # a terminal 120 columns wide
    try:
        p = subprocess.run([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=term, text=True,
                           cwd=ROOT, env=env, timeout=120)
        os.close(term)
        term = None
        err = b""
        while True:
            try:
                chunk = os.read(main, 1 << 16)
            except OSError:   # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(main)
        if term is not None:
            os.close(term)
    assert p.returncode == 0 and json.loads(p.stdout)["steps"] >= 1
    assert "reading t.json" in err.decode(errors="replace")


PEAK = """import re, sys
from perf_doctor import load, stream
def kb(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))
stream.CHUNK = 1 << 21                             # 2 MiB chunks (16 MiB by default) for a small file
base = kb("VmRSS")
open("/proc/self/clear_refs", "w").write("5")   # the peak resident set starts again from now
if sys.argv[2] == "whole":
    doc = load.trim(load.load_trace(sys.argv[1]), max_steps=2)[0]
else:
    doc = stream.read_trimmed(sys.argv[1], max_steps=2, keep_mb=0)[0]
print(kb("VmHWM") - base, len(doc["traceEvents"]))
"""


def test_streamed_reading_holds_far_less_than_a_whole_read(tmp_path):
    """A ~24 MB trace of ~26 steps: the whole read grows the process by several times the file; the streamed one
    (2 passes, the first 2 steps kept, 2 MiB chunks) by much less. The peak resident set of a fresh child."""
    from benchmarks import doctor_bench

    path = tmp_path / "big.json"
    doctor_bench.tile(doctor_bench.synthetic_steps(6), path, 24)
    size_kb = path.stat().st_size / 1024
    grown = {}
    for how in ("whole", "streamed"):
        p = subprocess.run([sys.executable, "-c", PEAK, str(path), how], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
        assert p.returncode == 0, p.stderr[-500:]
        grown[how], kept = map(int, p.stdout.split())
        grown[how + "_events"] = kept
    assert grown["whole_events"] == grown["streamed_events"]
    assert grown["whole"] > 3 * size_kb                # what the streamed reader avoids (~6.5x here)
    assert grown["streamed"] < 0.5 * grown["whole"]    # ~0.27x here
    assert math.isfinite(size_kb)
