"""A training step with a slow input planted, for the doctor's tests (notebook 05 now writes its own plants in its
cells): ``input_step(ms)``, a small MLP fed by a DataLoader (``num_workers=0``) whose dataset spends ``ms`` per
sample, 8 samples a batch; ``input_step(0)`` is the plain step, its one batch already in memory. Each call runs with
one intra-op thread: on a busy shared machine waking OpenMP workers would bury the plant."""
from __future__ import annotations

import time

import torch

from helpers.measure.diagnose import training_step
from helpers.measure.timing import torch_threads

BATCH = 8


class SlowSamples(torch.utils.data.Dataset):
    def __init__(self, ms: float):
        self.ms = ms

    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(self.ms / 1000)
        return torch.randn(64), i % 10


def input_step(ms: float):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = (torch.utils.data.DataLoader(SlowSamples(ms), batch_size=BATCH) if ms > 0
            else [(torch.randn(BATCH, 64), torch.randint(0, 10, (BATCH,)))])
    train = training_step(model, opt, data)

    def step():
        with torch_threads(1):
            return train()
    return step
