"""The same training module under ``torchrun`` (notebook 06 prints the command): one run with 2 gloo ranks on this
CPU, a tiny plan (two timed rounds, the profiles), then what the notebook reads from it: both ranks' step times, a
trace per rank per experiment, no_sync's all-reduce count, the straggler named by the doctor. ~20-30 s."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import traces as tr
from helpers.lessons.distributed import launch, readings, train

TINY = dict(batch_size=64, features=32, hidden=64, layers=2, micro_batch=4, accum=3, rounds=2, warmup=1,
            bucket_caps=[0.01, 25.0], straggler_ms=80.0, n_batches=2, threads=1)


def test_torchrun_runs_the_training_module_with_two_cpu_ranks(tmp_path):
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        pytest.skip("torchrun is not installed beside this Python")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("2 ranks need 2 CPU cores")
    (tmp_path / "plan.json").write_text(json.dumps(TINY))
    out = tmp_path / "job"
    cmd = launch.torchrun_command(str(out), 2, str(tmp_path / "plan.json")).split("   #")[0].split()
    env = dict(os.environ, PYTHONPATH=str(Path(launch.__file__).resolve().parents[3]), KINETO_LOG_LEVEL="5")
    proc = subprocess.run([torchrun] + cmd[1:], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in rows] == [0, 1] and {r["world"] for r in rows} == {2}
    assert {r["backend"] for r in rows} == {"gloo"} and rows[0]["plan"]["accum"] == 3
    assert all(len(rows[0]["times_ms"][v]) == 2 for v in train.VARIANTS)
    folders = sorted(p.name for p in (out / "traces").iterdir())
    assert folders == sorted(["single", "bucket 0.01", "bucket 25", "accum sync", "accum no_sync", "straggler"])
    for f in folders:   # one file per rank (the single process: rank 0 alone)
        assert len(list((out / "traces" / f).glob("rank*.pt.trace.json"))) == (1 if f == "single" else 2), f
    sync, nosync = (readings.all_reduces(out / "traces" / k) for k in ("accum sync", "accum no_sync"))
    assert all(sync[r] == 3 * nosync[r] > 0 for r in (0, 1)), (sync, nosync)
    buckets = [readings.all_reduces(out / "traces" / f"bucket {c:g}")[0] for c in TINY["bucket_caps"]]
    assert buckets[0] > buckets[1], buckets
    job = tr.diagnose_job(out / "traces" / "straggler", views=False)
    assert job["straggler"] and job["straggler"]["rank"] == train.PLAN["straggler_rank"]
