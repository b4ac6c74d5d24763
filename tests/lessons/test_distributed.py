"""helpers.lessons.distributed (notebook 06) without starting torch ranks: ranks against cores, the port, the
launcher (a dead rank, a timeout: failed rows naming the rank, every process stopped; a port taken before the
rendezvous), the panel's run and validator, the readings of traces (all-reduces per step on CPU and recorded NCCL
traces, the overhead table, HTA on a folder it cannot read, the timelines)."""
import json
import os
import sys
import time
from pathlib import Path

import pytest

from helpers.lessons.distributed import experiment, launch, views
from helpers.measure.validate import InvalidValue
from helpers.notebook.results import Results
from tests.shared_data import other_trace


@pytest.mark.parametrize("ranks,cores,threads,gpus,message", [
    (3, 2, 1, 0, "more than this machine's 2 CPU cores"),
    (2, 2, 2, 0, "2 ranks × 2 thread(s)"),
    (1, 8, 1, 0, "at least 2"),
    ("2", 8, 1, 0, "whole number"),
    (True, 8, 1, 0, "whole number"),
    (4, 64, 1, 2, "2 GPU(s)"),
])
def test_too_many_ranks_are_refused_with_the_reason(ranks, cores, threads, gpus, message):
    with pytest.raises(InvalidValue, match=message.replace("(", r"\(").replace(")", r"\)")):
        launch.check_ranks(ranks, threads, cores=cores, gpus=gpus)


def test_ranks_that_fit_are_accepted():
    assert launch.check_ranks(2, 1, cores=2) == 2
    assert launch.check_ranks(8, 1, cores=2, gpus=8) == 8   # NCCL: one rank per GPU, cores aside


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _torchrun(tmp_path, code, world=2, timeout_s=60):
    """``launch.start`` and ``launch.wait`` on a stand-in rank script (a line of Python per rank)."""
    (tmp_path / "rank.py").write_text(code)
    proc = launch.start(tmp_path / "rank.py", tmp_path / "job", world, {})
    pids = [proc.pid]
    return launch.wait(proc, tmp_path / "job", world, timeout_s, pids), pids


def test_a_dead_rank_stops_the_others_and_is_named(tmp_path):
    code = ("import os, sys, time\nif os.environ['RANK'] == '1':\n"
            "    print('rank 1: out of luck', file=sys.stderr); sys.exit(3)\ntime.sleep(60)\n")
    t0 = time.monotonic()
    rows, pids = _torchrun(tmp_path, code)
    assert time.monotonic() - t0 < 40   # it did not wait for the sleeping rank
    assert rows[1]["status"] == "failed" and rows[1]["error"] == "rank 1 died (exit code 3): rank 1: out of luck"
    assert rows[0]["status"] == "failed" and rows[0]["error"] == "rank 0 stopped because rank 1 died"
    # torchrun, its two ranks, and any process of theirs seen meanwhile (torchrun may start a helper)
    assert len(pids) >= 3 and not any(_alive(p) for p in pids)


def test_a_job_past_its_timeout_is_stopped(tmp_path):
    rows, pids = _torchrun(tmp_path, "import time\ntime.sleep(60)\n", timeout_s=5)
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all("did not finish within" in r["error"] and f"rank {r['rank']}" in r["error"] for r in rows)
    assert not any(_alive(p) for p in pids)


def test_ranks_that_finish_are_ok_rows(tmp_path):
    rows, _ = _torchrun(tmp_path, "pass\n")
    assert [(r["status"], r["error"]) for r in rows] == [("ok", None), ("ok", None)]


def test_the_command_is_torchruns():
    cmd = launch.torchrun_command("ddp_rank.py", "out", 2)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and cmd[3:6] == ["--standalone", "--nproc-per-node", "2"]


GOOD = {"ranks": 2, "bucket_cap_mb": 25.0, "accum": 4, "no_sync": True, "straggler_ms": 50}


@pytest.mark.parametrize("key,value,message", [
    ("ranks", 3, "CPU cores"), ("bucket_cap_mb", 0, "positive"), ("bucket_cap_mb", "big", "positive"),
    ("accum", 0, "accumulation steps"), ("accum", 2.5, "accumulation steps"), ("no_sync", "yes", "True or False"),
    ("straggler_ms", -1, "straggler delay"), ("straggler_ms", 1e9, "straggler delay"),
])
def test_the_panel_refuses_bad_values(key, value, message):
    with pytest.raises(InvalidValue, match=message):
        experiment.validate_config(dict(GOOD, **{key: value}), cores=2)


def test_the_panel_accepts_good_values():
    assert experiment.validate_config(GOOD, cores=2) == dict(GOOD, straggler_ms=50.0)


# Stand-ins for the notebook's rank script (it imports torch: seconds per rank), doing what the launcher must handle.
DIES = """import os, time
if os.environ["RANK"] == "0":
    raise SystemExit("rank 0: planted failure, exiting")
time.sleep(60)
"""
def test_a_job_whose_rank_dies_is_failed_rows_and_its_pids_are_noted(tmp_path):
    """run_job end to end with the real launcher and a rank that dies (the appendix)."""
    (tmp_path / "rank.py").write_text(DIES)
    res = Results("06_distributed", "smoke", root=tmp_path / "results")
    job = experiment.run_job("expected failure", tmp_path / "rank.py", {"die_rank": 0}, 2, tmp_path / "job", res,
                             timeout_s=60)
    assert not job["ok"] and job["times"] == {}
    rows = [e for e in res.experiments if e["name"].startswith("expected failure")]
    assert len(rows) == 2 and all(e["status"] == "failed" and e["error"] and "\n" not in e["error"] for e in rows)
    assert rows[0]["error"] == "rank 0 died (exit code 1): rank 0: planted failure, exiting"
    assert rows[1]["error"] == "rank 1 stopped because rank 0 died"
    pids = res.notes[experiment.PIDS_NOTE]
    # torchrun, its two ranks, and any process of theirs seen meanwhile (torchrun may start a helper)
    assert len(pids) >= 3 and not any(_alive(p) for p in pids)
    assert json.loads((tmp_path / "job" / "plan.json").read_text()) == {"die_rank": 0}


def _trace(path: Path, rank: int, allreduce_ts: list[float], steps=((0, 100), (100, 200))):
    evs = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": a,
            "dur": b - a} for i, (a, b) in enumerate(steps)]
    evs += [{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 7, "ts": t, "dur": 5}
            for t in allreduce_ts]
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"},
                                "traceEvents": evs}))


def test_all_reduces_are_counted_per_step_in_the_step_windows(tmp_path):
    _trace(tmp_path / "rank0.1.pt.trace.json", 0, [10, 20, 110, 120, 250])   # 250: outside the steps
    _trace(tmp_path / "rank1.1.pt.trace.json", 1, [10, 110])
    assert views.all_reduces(tmp_path) == {0: 2.0, 1: 1.0}


def test_all_reduces_on_a_recorded_nccl_job():
    """A recorded 8-rank NCCL job (host labels counted; the device-side copies are not counted again)."""
    counts = views.all_reduces(other_trace("param_dlrm_8rank"))
    assert sorted(counts) == list(range(8)) and set(counts.values()) == {3.0}
    assert views.all_reduces(other_trace("hta_nccl_data.json.gz")) == {0: 5.0}


def test_the_overhead_table_adds_up():
    single = {"step_ms": 100.0, "exposed_ms": 0.0, "overlapped_ms": 0.0, "other_ms": 100.0}
    ddp = {"step_ms": 70.0, "exposed_ms": 15.0, "overlapped_ms": 5.0, "other_ms": 55.0}
    t = views.overhead_table(single, ddp, 2)["ms"]
    assert t.iloc[1] == 50.0 and t.iloc[3] == 5.0 and t.iloc[4] == 15.0 and t.iloc[5] == 5.0
    assert t.iloc[1] + t.iloc[3] + t.iloc[4] == t.iloc[2]   # ideal + extra compute + exposed = the DDP step


def test_hta_on_a_folder_without_traces_is_none(tmp_path):
    assert views.hta_overlap(tmp_path) is None


def test_waits_table_puts_the_two_jobs_side_by_side():
    rank = lambda r, w, top: {"rank": r, "step_ms": 10.0, "top_cause": top, "waits_ms": w}   # noqa: E731
    before = {"ranks": [rank(0, 0.5, "compute"), rank(1, 0.1, "compute")]}
    after = {"ranks": [rank(0, 80.0, "communication"), rank(1, 0.0, "input"),
                       {"rank": 2, "error": "unreadable"}]}
    t = views.waits_table(before, after)
    assert list(zip(t["rank"], t["job"], t["waits ms"])) == [
        (0, "straggler", 80.0), (0, "no straggler", 0.5), (1, "straggler", 0.0), (1, "no straggler", 0.1)]


def test_timelines_one_figure_per_rank(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    _trace(tmp_path / "rank0.1.pt.trace.json", 0, [10, 110])
    _trace(tmp_path / "rank1.1.pt.trace.json", 1, [10, 110])
    figs = views.timelines(tmp_path)
    assert [r for r, _ in figs] == [0, 1] and figs[1][1].axes[0].get_title().startswith("rank 1")


def test_the_panel_run_adds_a_row_or_a_failed_row(tmp_path, monkeypatch):
    res = Results("06_distributed", "smoke", root=tmp_path)
    t = {"ddp": [10.0, 12.0], "straggler": [30.0, 32.0], "accum sync": [40.0, 42.0], "accum no_sync": [20.0, 22.0]}
    seen = {}

    def fake(name, script, plan, world, out, results, **kw):
        seen.update(plan=plan, world=world, script=script)
        return {"ok": True, "rows": [], "times": t}

    monkeypatch.setattr(experiment, "run_job", fake)
    kw = dict(ranks=2, bucket_cap_mb=1.0, accum=4, no_sync=True, straggler_ms=30.0)
    table = experiment.try_config(res, "ddp_rank.py", {"rounds": 24}, tmp_path, **kw)
    assert seen["world"] == 2 and seen["script"] == "ddp_rank.py"
    assert seen["plan"] == {"rounds": 4, "warmup": 1, "profile": False, "bucket_cap_mb": 1.0, "accum": 4,
                            "straggler_ms": 30.0}
    assert table.iloc[-1]["accum_step_ms"] == 21.0 and table.iloc[-1]["ddp_step_ms"] == 11.0
    monkeypatch.setattr(experiment, "run_job", lambda *a, **k: {"ok": False, "times": {}, "rows": [
        {"error": None}, {"error": "rank 1 died (exit code 1): boom"}]})
    table = experiment.try_config(res, "ddp_rank.py", {"rounds": 24}, tmp_path, **kw)
    assert table.iloc[-1]["status"] == "failed" and table.iloc[-1]["error"] == "rank 1 died (exit code 1): boom"


@pytest.mark.parametrize(("verdict", "holds"), [("slower", True), ("faster", False), ("no difference", None)])
def test_the_straggler_claim_is_made_only_where_the_interval_resolves_it(verdict, holds):
    from helpers.lessons.distributed import checks as lesson_checks
    from helpers.notebook.checks import judge

    ratio = {"slower": 0.8, "faster": 1.2, "no difference": 1.0}[verdict]
    cmp = {"a": "DDP 2 ranks", "b": lesson_checks.STRAGGLER, "metric": "step_ms_mean", "ratio": ratio,
           "low": ratio - 0.05, "high": ratio + 0.05, "verdict": verdict}
    claim = [c for c in lesson_checks.CLAIMS if c.id == "straggler_slows_the_job"]
    assert judge({"comparisons": [cmp]}, claim)[0]["holds"] is holds
