"""A small distributed job on this CPU, for the doctor's tests: ``python tests/traces/gloo_job.py OUT [SLOW_MS]``.

Two ranks (spawned processes, the gloo backend on 127.0.0.1) train a small MLP under DistributedDataParallel and
profile 4 steps with ``tensorboard_trace_handler(OUT, worker_name="rank<r>")``: a folder of two workers, one per
rank. Rank 1 sleeps ``SLOW_MS`` (default 20) ms at the start of every step, so it is the straggler: rank 0 waits for
it inside gloo's all-reduce. Takes a few seconds.
"""
import os
import socket
import sys
import time


def run(rank: int, world: int, out: str, port: int, slow_ms: float) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 256)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4),
                 on_trace_ready=tensorboard_trace_handler(out, worker_name=f"rank{rank}")) as prof:
        for _ in range(6):
            if rank == 1:
                time.sleep(slow_ms / 1000.0)
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    import torch.multiprocessing as mp

    out_dir = sys.argv[1]
    slow = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    mp.spawn(run, args=(2, out_dir, free_port(), slow), nprocs=2)
