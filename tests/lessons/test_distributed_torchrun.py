"""Notebook 06's rank script under ``torchrun`` (the notebook prints the command): the script is taken from the
notebook's ``%%writefile`` cells (its one source), run with 2 gloo ranks on this CPU and a tiny plan (two timed
rounds, the profiles), then what the notebook reads from it: both ranks' step times, a trace per rank per experiment,
no_sync's all-reduce count, the straggler named by the doctor. ~20-30 s."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import perf_doctor as tr
from helpers.lessons.distributed import views

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("single", "ddp", "straggler", "accum sync", "accum no_sync")
TINY = dict(batch_size=64, features=32, hidden=64, layers=2, classes=10, micro_batch=4, accum=3, rounds=2, warmup=1,
            bucket_caps=[0.01, 25.0], bucket_cap_mb=25.0, straggler_rank=1, straggler_ms=80.0, straggler_steps=3, n_batches=2,
            threads=1, wait=1, warmup_steps=1, active=3, device="cpu", die_rank=None, profile=True)


def rank_script(notebook: Path = ROOT / "notebooks" / "06_distributed.ipynb") -> str:
    """What the notebook's ``%%writefile`` / ``%%writefile -a`` cells write, in order (IPython ends each cell's body
    with a newline)."""
    cells = ["".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    heads, parts = zip(*(src.split("\n", 1) for src in cells if src.startswith("%%writefile")))
    assert not heads[0].startswith("%%writefile -a") and all(h.startswith("%%writefile -a") for h in heads[1:])
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def test_the_script_is_written_by_open_cells_with_the_lessons_calls():
    src = rank_script()
    compile(src, "ddp_rank.py", "exec")
    for call in ("init_process_group(", "DDP(", "bucket_cap_mb=bucket_cap_mb", "no_sync()", "DistributedSampler("):
        assert call in src, call


def test_torchrun_runs_the_rank_script_with_two_cpu_ranks(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        pytest.skip("torchrun is not installed beside this Python")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("2 ranks need 2 CPU cores")
    script, out = tmp_path / "ddp_rank.py", tmp_path / "job"
    script.write_text(rank_script())
    (tmp_path / "plan.json").write_text(json.dumps(TINY))
    out.mkdir()
    cmd = [torchrun, "--standalone", "--nproc-per-node", "2", str(script), str(out), str(tmp_path / "plan.json")]
    proc = subprocess.run(cmd, env=dict(os.environ, KINETO_LOG_LEVEL="5", OMP_NUM_THREADS="1"), capture_output=True,
                          text=True, timeout=120)
    # the rank's own error (gloo's abort message) comes first; torchrun's summary last
    assert proc.returncode == 0, proc.stderr[:3000] + "\n...\n" + proc.stderr[-1500:]
    rows = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in rows] == [0, 1] and {r["world"] for r in rows} == {2}
    assert {r["backend"] for r in rows} == {"gloo"}
    assert all(len(rows[0]["times_ms"][v]) == 2 for v in VARIANTS)
    folders = sorted(p.name for p in (out / "traces").iterdir())
    assert folders == sorted(["single", "bucket 0.01", "bucket 25", "accum sync", "accum no_sync", "straggler"])
    for f in folders:   # one file per rank (the single process: rank 0 alone)
        assert len(list((out / "traces" / f).glob("rank*.pt.trace.json"))) == (1 if f == "single" else 2), f
    sync, nosync = (views.all_reduces(out / "traces" / k) for k in ("accum sync", "accum no_sync"))
    assert all(sync[r] == 3 * nosync[r] > 0 for r in (0, 1)), (sync, nosync)
    buckets = [views.all_reduces(out / "traces" / f"bucket {c:g}")[0] for c in TINY["bucket_caps"]]
    assert buckets[0] > buckets[1], buckets
    job = tr.diagnose_job(out / "traces" / "straggler", views=False)
    assert job["straggler"] and job["straggler"]["rank"] == TINY["straggler_rank"]
