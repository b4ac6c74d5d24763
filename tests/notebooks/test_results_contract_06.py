"""Notebook 06 after nbmake has executed it (``make test``): its results hold the lesson's structure, and no rank
it started is left running."""
import os
from pathlib import Path

import pytest

from helpers.measure import compare
from helpers.notebook import results

STEM = "06_distributed"
SCRIPT = "ddp_rank.py"   # the rank script the notebook's %%writefile cells write and its launcher starts


def _doc():
    if "PERF_RESULTS_DIR" not in os.environ:
        pytest.fail("run through `make test`, which executes the notebooks first and sets PERF_RESULTS_DIR")
    return results.load(STEM)


def _running(pid: int) -> bool:
    """A live (not zombie) process with this pid that runs the rank script."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z" and SCRIPT in cmd


def test_distributed_structure():
    doc = _doc()
    rows = {e["name"]: e for e in doc["experiments"]}
    ranks = [e for n, e in rows.items() if n.startswith("job: rank ")]
    assert len(ranks) >= 2 and all(e["status"] == "ok" for e in ranks)
    for v in ("single", "ddp", "straggler", "accum sync", "accum no_sync"):
        m = rows[f"interleaved {v}"]
        assert m["config"]["timing"] == "interleaved" and m["metrics"]["steps_timed"] >= 2 and m["metrics"][
            "step_ms_mean"] > 0
    split = rows["ddp overhead split"]["metrics"]
    assert split["ddp_step_ms"] > 0 and split["exposed_comm_ms"] + split["overlapped_comm_ms"] > 0
    pairs = [(c["a"], c["b"]) for c in doc["comparisons"]]
    assert len(pairs) == 3 and all(c["metric"] == "step_ms_mean" for c in doc["comparisons"])
    assert {b for _, b in pairs} == {f"DDP {len(ranks)} ranks", "DDP with a straggler", "accumulation under no_sync"}
    # a check that claims a gain (or a loss) holds only when its comparison says so
    by_b = {c["b"]: c for c in doc["comparisons"]}
    assert doc["checks"]["no_sync_accumulation_faster"] == (
        compare.direction(by_b["accumulation under no_sync"]) == "faster")
    straggler = compare.direction(by_b["DDP with a straggler"])
    # made only where the rounds' interval resolves it (a loaded machine's often spans 1): then it holds when slower
    assert doc["checks"].get("straggler_slows_the_job", None) == (
        None if straggler is None else straggler == "slower")
    # the doctor's claims: made only where the traces resolve the planted rank's lateness (its interval above 0);
    # a loaded machine's own delays can drown it, and the doctor then rightly names the rank that came out late
    named = rows["straggler doctor"]
    m = named["metrics"]
    assert m["planted_late_collectives"] >= 2 and m["planted_late_low_ms"] <= m["planted_late_mean_ms"]
    doctor = {"doctor_names_the_straggler", "others_wait_for_the_straggler", "report_leads_with_the_straggler"}
    resolved = m["planted_late_low_ms"] > 0
    assert (doctor <= set(doc["checks"])) == resolved and not (doctor & set(doc["checks"])) == resolved
    assert set(doc["checks"]) - {"straggler_slows_the_job"} - doctor == {
        "ddp_traces_hold_split_communication", "smaller_buckets_more_all_reduces",
        "no_sync_divides_all_reduces_by_accum", "no_sync_accumulation_faster", "too_many_ranks_refused",
        "dead_rank_is_a_failed_row", "straggler_is_a_fraction_of_the_step", "profiled_clock_agrees_with_wall_clock"}
    if resolved:
        assert m["named_rank"] == named["config"]["planted_rank"]
    counts = doc["notes"]["all_reduces_per_optimizer_step"]
    speedup = doc["notes"]["ddp_speedup"]   # 06-2: means and medians, super-linear said where it is
    assert speedup["median_ratio"] > 0 and speedup["super_linear"] == (speedup["mean_ratio"] > len(ranks))
    assert all(r["accum sync"] > r["accum no_sync"] > 0 for r in counts)
    # the appendix: a rank that dies is a failed row naming it; every rank of the job is stopped
    dead = [e for n, e in rows.items() if n.startswith("expected failure")]
    assert len(dead) >= 2 and all(e["status"] == "failed" and e["error"] and "\n" not in e["error"] for e in dead)
    assert any("rank 1 died" in e["error"] for e in dead)


def test_no_rank_is_left_behind():
    pids = _doc()["notes"]["rank_pids"]
    assert len(pids) >= 4   # the job's ranks and the dead-rank demo's
    assert not [p for p in pids if _running(p)], "ranks still running after the notebook"


def test_running_finds_a_live_training_process(tmp_path):
    """The check above can fail: a process whose command line names the module is found while it runs."""
    import subprocess
    import sys

    import time

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", SCRIPT])
    try:
        t0 = time.monotonic()
        while not _running(p.pid) and time.monotonic() - t0 < 10:   # until its command line is readable
            time.sleep(0.05)
        assert _running(p.pid)
    finally:
        p.kill()
        p.wait()
    assert not _running(p.pid)
