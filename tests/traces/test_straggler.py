"""A 10-20% straggler (issue 32 item 6): a synthetic job of 4 GPU ranks where one rank's step is 15% slower (its
data loading, or a larger compute) is named the straggler with its cause; ranks with +-3% jitter and no slow rank
give no straggler (no false positive from noise)."""
import json
import random

import pytest

from perf_doctor import job
from tests import fake_trace as ft

MS = 1000.0
RANKS, STEPS, COMPUTE_MS, COMM_MS = 4, 6, 20.0, 2.0


def write_job(folder, *, slow=None, slow_by="input", extra=0.15, jitter=0.03, seed=0):
    """A folder of ``RANKS`` GPU traces (``worker<r>.pt.trace.json``, the rank in ``distributedInfo``). Each step:
    the DataLoader's ``__next__`` (1 ms), compute kernels (``COMPUTE_MS``, +-``jitter`` per rank and step), then an
    NCCL all-reduce that ends on every rank ``COMM_MS`` after the last rank joins it. Rank ``slow`` takes ``extra``
    of the step longer, in its data loading (``slow_by="input"``) or its compute (``"compute"``)."""
    rng = random.Random(seed)
    evs = {r: [] for r in range(RANKS)}
    t, c = 0.0, 0
    for k in range(STEPS):
        ready = {}
        for r in range(RANKS):
            data = 1.0 * MS
            comp = COMPUTE_MS * MS * (1 + rng.uniform(-jitter, jitter))
            if r == slow:
                if slow_by == "input":
                    data += extra * (COMPUTE_MS + 3) * MS
                else:
                    comp += extra * (COMPUTE_MS + 3) * MS
            e = evs[r]
            e.append(ft.ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t + 10, data - 20,
                           "user_annotation"))
            g = t + data
            for j in range(4):       # four kernels, each launched just before it runs
                c += 1
                e += [ft.op("aten::mm", g - 30, 25), ft.runtime("cudaLaunchKernel", g - 20, 5, corr=c),
                      ft.kernel("gemm_kernel", g, comp / 4, corr=c)]
                g += comp / 4
            ready[r] = g
        end = max(ready.values()) + COMM_MS * MS
        for r in range(RANKS):
            c += 1
            evs[r] += [ft.runtime("ncclAllReduce", ready[r] - 15, 5, corr=c),
                       ft.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", ready[r], end - ready[r], corr=c),
                       ft.step(k, t, end + 50 - t)]
        t = end + 60
    for r in range(RANKS):
        (folder / f"worker{r}.1.pt.trace.json").write_text(json.dumps(
            ft.doc(*evs[r], distributedInfo={"rank": r, "world_size": RANKS, "backend": "nccl"})))
    return folder


@pytest.mark.parametrize("slow_by, cause", [("input", "input"), ("compute", "compute")])
def test_a_15pct_straggler_is_named_with_its_cause(tmp_path, slow_by, cause):
    rep = job.diagnose_job(write_job(tmp_path, slow=2, slow_by=slow_by), views=False)
    s = rep["straggler"]
    assert s is not None, rep["verdict"]
    assert s["rank"] == 2 and s["cause"] == cause, s
    assert 0.10 * rep["step_ms"] <= s["ms"] <= 0.20 * rep["step_ms"], s
    assert f"Straggler: rank 2" in rep["verdict"] and cause in rep["verdict"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jitter_alone_is_no_straggler(tmp_path, seed):
    rep = job.diagnose_job(write_job(tmp_path, slow=None, seed=seed), views=False)
    assert rep["straggler"] is None, rep["straggler"]
    assert "No straggler" in rep["verdict"]


def test_ranks_read_in_worker_processes_give_the_same_job(tmp_path):
    """``workers=2`` (the command line's --jobs: ranks in forked processes, one rank's events in each) gives the same
    job as one rank after another, and the views of a job above RANK_VIEWS_MAX ranks are left out with a note."""
    write_job(tmp_path, slow=1, slow_by="compute")
    strip = lambda rep: {k: v for k, v in rep.items() if not k.startswith("_")}  # noqa: E731
    one, two = (strip(job.diagnose_job(tmp_path, workers=w)) for w in (1, 2))
    assert one == two and one["straggler"]["rank"] == 1
    old = job.RANK_VIEWS_MAX
    try:
        job.RANK_VIEWS_MAX = 2
        many = job.diagnose_job(tmp_path, workers=2)
    finally:
        job.RANK_VIEWS_MAX = old
    assert any("views left out" in n for n in many["notes"]) and many["straggler"]["rank"] == 1
    assert many["idle_causes"] == one["idle_causes"]


def test_the_job_report_leads_with_the_straggler(tmp_path):
    """``perf-doctor job FOLDER`` (job_text): with a straggler, the first finding and the first "What to do" name the
    slow rank and its share of the step, before the verdict and the job's top cause (compute here); without one the
    report opens with the verdict as before."""
    rep = job.diagnose_job(write_job(_dir(tmp_path, "slow"), slow=2), views=False)
    lines = [ln for ln in job.job_text(rep).splitlines() if not ln.startswith(" ")]
    share = f"{rep['straggler']['ms'] / rep['step_ms']:.0%} of the step"
    assert lines[1].startswith("Straggler: rank 2: the others wait") and share in lines[1], lines[:3]
    todo = next(ln for ln in lines if ln.startswith("What to do"))
    assert todo == lines[2] and todo.startswith(f"What to do (straggler: rank 2, {share}): fix its input"), todo
    assert lines[3].startswith("Verdict:") and lines[4].startswith("Then (compute)"), lines[3:5]
    calm = job.diagnose_job(write_job(_dir(tmp_path, "calm"), slow=None), views=False)
    lines = [ln for ln in job.job_text(calm).splitlines() if not ln.startswith(" ")]
    assert lines[1].startswith("Verdict:") and lines[2] == "Straggler: none stands out", lines[:4]
    assert lines[3].startswith("What to do (compute)"), lines[3]


def _dir(root, name):
    (root / name).mkdir()
    return root / name
