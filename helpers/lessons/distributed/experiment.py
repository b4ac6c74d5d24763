"""Notebook 06's runs: one launch of the ranks as results rows (``run_job``) and the panel's run."""

import json
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from ...measure.validate import InvalidValue, validate_bool, validate_positive
from . import launch

PIDS_NOTE = "rank_pids"  # every rank's pid: a test checks that none is left running


def run_job(
    name: str,
    script: Path | str,
    plan: dict,
    world: int,
    out: Path | str,
    results,
    *,
    timeout_s: float = 240.0,
) -> dict[str, Any]:
    """``script`` on ``world`` ranks under ``torchrun`` into ``out`` (emptied), a row per rank: ``{ok, rows, times,
    ranks, command}`` (rank 0's step times per variant, ms; what each rank wrote; the command as typed)."""
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    proc = launch.start(script, out, world, plan)
    pids = [proc.pid]
    rows = launch.wait(proc, out, world, timeout_s, pids)
    results.note(PIDS_NOTE, (results.notes.get(PIDS_NOTE) or []) + pids)
    for r in rows:
        results.add(
            f"{name}: rank {r['rank']}",
            {"world": world, "rank": r["rank"], "launcher": "torchrun"},
            {"returncode": r["returncode"]},
            status=r["status"],
            error=r["error"],
        )
    ok = all(r["status"] == "ok" for r in rows)
    docs = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)] if ok else []
    # the command as typed from this folder: relative paths, never absolute
    parts = launch.torchrun_command(os.path.relpath(script), os.path.relpath(out), world)
    command = " ".join(["torchrun", *parts[3:]])
    times = docs[0]["times_ms"] if docs else {}
    return {"ok": ok, "rows": rows, "times": times, "ranks": docs, "command": command}


def validate_config(values: dict[str, Any], cores: int | None = None, gpus: int = 0) -> dict:
    """The panel's values checked: ranks, bucket MB > 0, accumulation 1..64, no_sync a bool, straggler 0..2000 ms."""
    v = dict(values)
    v["ranks"] = launch.check_ranks(v.get("ranks"), cores=cores, gpus=gpus)
    v["bucket_cap_mb"] = float(validate_positive(v.get("bucket_cap_mb"), "bucket size (MB)"))
    acc = v.get("accum")
    if isinstance(acc, bool) or not isinstance(acc, int) or not 1 <= acc <= 64:
        raise InvalidValue(f"accumulation steps must be a whole number from 1 to 64, not {acc!r}.")
    v["no_sync"] = validate_bool(v.get("no_sync"), "no_sync")
    d = v.get("straggler_ms")
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 2000:
        raise InvalidValue(f"straggler delay must be 0 to 2000 ms, not {d!r}.")
    v["straggler_ms"] = float(d)
    return v


def try_config(results, script: Path | str, base: dict, out: Path | str, timeout_s=240.0, **cfg):
    """The panel's run of ``cfg`` (ranks, bucket_cap_mb, accum, no_sync, straggler_ms: a few timed rounds, no
    profiles): one ``panel`` row or a failed row; returns the panel rows."""
    keep = {k: cfg[k] for k in ("bucket_cap_mb", "accum", "straggler_ms")}
    plan = dict(base, **keep, rounds=4, warmup=1, profile=False)
    job = run_job(
        f"panel {cfg['ranks']} ranks", script, plan, cfg["ranks"], out, results, timeout_s=timeout_s
    )
    if job["ok"]:
        t = {k: statistics.fmean(v) for k, v in job["times"].items()}
        accum = t["accum no_sync" if cfg["no_sync"] else "accum sync"]
        metrics = {
            "ddp_step_ms": t["ddp"],
            "straggler_step_ms": t["straggler"],
            "accum_step_ms": accum,
        }
        results.add("panel", cfg, metrics)
    else:
        error = next(r["error"] for r in job["rows"] if r["error"])
        results.add("panel", cfg, status="failed", error=error)
    t = results.table()
    return t[t["experiment"] == "panel"].dropna(axis=1, how="all")
