"""``events.memoized``: inside the block a trace's complete events and steps are read once; each caller still gets
its own list, a list that grew is read again, and nothing is kept after the block."""
from perf_doctor import events as ev


def _trace(n):
    return {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "ts": 10.0 * k,
                             "dur": 9.0, "pid": 1, "tid": 1} for k in range(n)]
            + [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10.0 * k + 1, "dur": 2.0, "pid": 1, "tid": 1}
               for k in range(n)] + [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]}


def test_inside_the_block_each_reader_passes_over_the_events_once(monkeypatch):
    doc = _trace(3)
    calls = []
    real = ev.valid_time
    monkeypatch.setattr(ev, "valid_time", lambda e: calls.append(e) or real(e))
    with ev.memoized():
        first = ev.complete(doc)
        n = len(calls)
        second = ev.complete(doc)
        assert len(calls) == n and first == second and first is not second   # read once, a list for each caller
        second.clear()
        assert len(ev.complete(doc)) == 6                                    # a caller's list is its own
        assert [e["name"] for e in ev.step_events(doc)] == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
        doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 40.0, "dur": 1.0})
        assert len(ev.complete(doc)) == 7                                    # the list grew: read again
    assert ev._memo is None
    before = len(calls)
    ev.complete(doc)
    ev.complete(doc)
    assert len(calls) == before + 2 * 7   # outside the block every call reads the events


def test_blocks_nest_and_the_doctor_entry_points_memoize():
    with ev.memoized():
        with ev.memoized():
            ev.complete(_trace(1))
        assert ev._memo is not None   # the inner block leaves the outer one's memo
    assert ev._memo is None
    import importlib

    from perf_doctor import diagnosis, job, report
    show = importlib.import_module("perf_doctor.show")   # the package's ``show`` is the function
    for fn in (report.trace_report, job.diagnose_job, diagnosis.diagnose, show.show):
        assert fn.__wrapped__   # functools.wraps of events.memoizing
