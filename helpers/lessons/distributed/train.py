"""One rank of the data-parallel job (notebook 06): the same code under the notebook's launcher and under ``torchrun``.

    torchrun --standalone --nproc-per-node 2 -m helpers.lessons.distributed.train --out runs/06 [--plan plan.json]

A rank reads its place from the environment that ``torchrun`` (or ``launch.start``) sets: ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``. gloo on CPU processes, NCCL with one GPU per rank. The plan (a
JSON file, defaults in ``PLAN``; ``device``: "cpu" or "cuda") says what to run, all in one launch (starting a rank costs seconds: it imports torch):

- timed **rounds** (``helpers.measure.timing.rotation``: every variant once per round, starting at a rotating one),
  the ranks aligned by a barrier before each timed step: ``single`` (rank 0 trains a plain copy of the model on the
  global batch, the others wait), ``ddp`` (every rank trains on its share of the global batch), ``straggler`` (the
  same, but one rank's data loader sleeps ``straggler_ms`` per batch), ``accum sync`` / ``accum no_sync`` (one
  optimizer step of ``accum`` micro-batches; with ``no_sync`` only the last backward all-reduces);
- **profiles**, each into ``<out>/traces/<name>/`` with ``tensorboard_trace_handler`` (one file per rank):
  ``single``, ``bucket <mb>`` for each ``bucket_caps`` entry (the DDP step at that ``bucket_cap_mb``), ``accum sync``,
  ``accum no_sync`` and ``straggler``.

Each rank writes ``<out>/rank<r>.json``: its step times per variant (ms, rank 0's are the job's: it waits for the
others in every all-reduce), backend, device and pid. ``die_rank`` makes that rank exit at once (the appendix's dead
rank).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

PLAN = dict(batch_size=128, features=256, hidden=512, layers=3, classes=10, micro_batch=8, accum=4, rounds=8,
            warmup=2, bucket_caps=[0.25, 25.0], bucket_cap_mb=25.0, straggler_rank=1, straggler_ms=60.0,
            wait=1, warmup_steps=1, active=3, threads=1, n_batches=4, die_rank=None, profile=True,
            device="cpu")
VARIANTS = ("single", "ddp", "straggler", "accum sync", "accum no_sync")


def env_place() -> dict:
    """The rank's place, from torchrun's environment variables (a clear message when they are missing)."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise SystemExit(f"train: {', '.join(missing)} not set: start it with torchrun or launch.start")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return {"rank": rank, "world": world, "local_rank": int(os.environ.get("LOCAL_RANK", rank))}


def build_model(plan: dict):
    """The MLP: ``layers`` Linear+ReLU of width ``hidden``, then a classifier (seeded: the same on every rank)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    mods, d = [], plan["features"]
    for _ in range(plan["layers"]):
        mods += [nn.Linear(d, plan["hidden"]), nn.ReLU()]
        d = plan["hidden"]
    return nn.Sequential(*mods, nn.Linear(d, plan["classes"]))


class Batches:
    """A map-style dataset of ``n`` ready batches; ``delay_ms`` of sleep per batch plants a slow data loader."""

    def __init__(self, n: int, batch: int, plan: dict, seed: int, device, delay_ms: float = 0.0):
        import torch

        g = torch.Generator().manual_seed(seed)
        self.items = [(torch.randn(batch, plan["features"], generator=g).to(device),
                       torch.randint(0, plan["classes"], (batch,), generator=g).to(device)) for _ in range(n)]
        self.delay = delay_ms / 1000.0

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        return self.items[i]


def endless(ds):
    """Batches from a ``DataLoader`` (so the profiler labels the wait for data), round and round."""
    from torch.utils.data import DataLoader

    loader = DataLoader(ds, batch_size=None, shuffle=False, num_workers=0)
    while True:
        yield from loader


def make_steps(plan: dict, place: dict, device):
    """``{variant: step function}`` for this rank, and the DDP factory used by the bucket sweep."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = place["rank"], place["world"]
    if plan["batch_size"] % world:
        raise SystemExit(f"train: global batch {plan['batch_size']} does not split over {world} ranks")
    local, ids = plan["batch_size"] // world, [place["local_rank"]] if device.type == "cuda" else None
    loss_fn = torch.nn.CrossEntropyLoss()

    def ddp(cap_mb: float):
        m = DDP(build_model(plan).to(device), device_ids=ids, bucket_cap_mb=cap_mb)
        return m, torch.optim.SGD(m.parameters(), lr=0.01)

    def step(model, opt, it, k=1, no_sync=False):
        for i in range(k):
            x, y = next(it)
            with model.no_sync() if no_sync and i < k - 1 else nullcontext():
                (loss_fn(model(x), y) / k).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    n, seed = plan["n_batches"], 1000 + rank
    model, opt = ddp(plan["bucket_cap_mb"])
    data = endless(Batches(n, local, plan, seed, device))
    slow = plan["straggler_ms"] if rank == plan["straggler_rank"] else 0.0
    slow_data = endless(Batches(n, local, plan, seed, device, delay_ms=slow))
    micro = endless(Batches(n, plan["micro_batch"], plan, seed, device))
    steps = {"ddp": lambda: step(model, opt, data), "straggler": lambda: step(model, opt, slow_data),
             "accum sync": lambda: step(model, opt, micro, plan["accum"]),
             "accum no_sync": lambda: step(model, opt, micro, plan["accum"], no_sync=True)}
    if rank == 0:
        plain = build_model(plan).to(device)
        plain_opt = torch.optim.SGD(plain.parameters(), lr=0.01)
        whole = endless(Batches(n, plan["batch_size"], plan, seed, device))
        steps["single"] = lambda: step(plain, plain_opt, whole)
    else:
        steps["single"] = lambda: None   # the others wait at the next barrier
    return steps, ddp, step, data


def timed_rounds(steps: dict, plan: dict, device) -> dict[str, list[float]]:
    """Each variant's step times (ms) on this rank, in interleaved rounds; the ranks meet at a barrier first."""
    import torch
    import torch.distributed as dist

    from ...measure.timing import rotation

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for name in VARIANTS:
        for _ in range(plan["warmup"]):
            steps[name]()
    out: dict[str, list[float]] = {n: [] for n in VARIANTS}
    for _, name in rotation(list(VARIANTS), plan["rounds"]):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        steps[name]()
        sync()
        out[name].append((time.perf_counter() - t0) * 1000.0)
    return out


def profile_into(folder: Path, fn, plan: dict, rank: int, device) -> None:
    """``wait + warmup_steps + active`` steps of ``fn`` under the profiler, the active ones written to ``folder``."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    n = plan["wait"] + plan["warmup_steps"] + plan["active"]
    with profile(activities=acts, schedule=schedule(wait=plan["wait"], warmup=plan["warmup_steps"],
                                                    active=plan["active"]),
                 on_trace_ready=tensorboard_trace_handler(str(folder), worker_name=f"rank{rank}")) as prof:
        for _ in range(n):
            fn()
            prof.step()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for rank<r>.json and traces/")
    ap.add_argument("--plan", help="a JSON file of plan entries (the rest: train.PLAN)")
    a = ap.parse_args(argv)
    plan = dict(PLAN, **(json.loads(Path(a.plan).read_text()) if a.plan else {}))
    place = env_place()
    if plan["die_rank"] == place["rank"]:
        print(f"rank {place['rank']}: planted failure, exiting", file=sys.stderr)
        return 3
    import torch
    import torch.distributed as dist

    on_gpu = plan["device"] == "cuda"   # NCCL, one GPU per rank; else gloo on CPU processes
    device = torch.device("cuda", place["local_rank"]) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    if plan["threads"]:
        torch.set_num_threads(int(plan["threads"]))
    dist.init_process_group("nccl" if on_gpu else "gloo", rank=place["rank"], world_size=place["world"])
    out, rank = Path(a.out), place["rank"]
    try:
        steps, ddp, step, data = make_steps(plan, place, device)
        times = timed_rounds(steps, plan, device) if plan["rounds"] else {}
        if plan["profile"]:
            traces = out / "traces"
            dist.barrier()
            if rank == 0:   # the single process alone; the others wait at the next barrier
                profile_into(traces / "single", steps["single"], plan, rank, device)
            for cap in plan["bucket_caps"]:
                m, o = ddp(cap)
                dist.barrier()
                profile_into(traces / f"bucket {cap:g}", lambda: step(m, o, data), plan, rank, device)
            for name in ("accum sync", "accum no_sync", "straggler"):
                dist.barrier()
                profile_into(traces / name, steps[name], plan, rank, device)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    row = {"rank": rank, "world": place["world"], "backend": "nccl" if on_gpu else "gloo", "device": str(device),
           "pid": os.getpid(), "threads": torch.get_num_threads(), "times_ms": times, "plan": plan}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
