"""The planted training steps the tests share: ``make_step(kind, size, item=True)``, a stand-in with the signature of
notebook 05's ``planted_step`` (which the notebook writes in its cells): a linear model's training step with one
plant — ``"input"`` (a dataset sleeping ``size`` ms a sample, 8 samples a batch), ``"launch/overhead"`` (``size``
tiny ops), ``"compute"`` (a ``size``² matrix product) — or none (``"none"``: one batch already in memory), run with
one intra-op thread. Used by the lesson's tests and by the doctor's."""
import time

import torch

from helpers.measure.training import training_step
from helpers.measure.timing import torch_threads


class SlowSamples(torch.utils.data.Dataset):
    def __init__(self, ms):
        self.ms = ms

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        time.sleep(self.ms / 1000)
        return torch.randn(8), i % 3


def make_step(kind, size, item=True):
    """A stand-in for the notebook's ``planted_step`` (same signature): a linear model's training step with one plant,
run with 1 intra-op thread."""
    torch.manual_seed(0)
    model, big = torch.nn.Linear(8, 3), torch.randn(int(size), int(size)) if kind == "compute" else None
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = (torch.utils.data.DataLoader(SlowSamples(size), batch_size=8) if kind == "input"
            else [(torch.randn(4, 8), torch.randint(0, 3, (4,)))])
    train = training_step(model, opt, data)

    def step():
        with torch_threads(1):   # as the notebook on a CPU: a busy machine's OpenMP wake-ups would bury the plant
            t = torch.ones(16)
            for _ in range(int(size) if kind == "launch/overhead" else 0):
                t = t * 1.0001
            if big is not None:
                (big @ big).sum()
            return train()
    return step
