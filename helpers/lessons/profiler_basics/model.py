"""The step notebook 01 profiles: a small CNN (``SmallCNN``), SGD with momentum and one fixed batch behind one labelled
training step (``build``), and the operators each call of a step runs (``ops_per_step``: a first step differs)."""
from __future__ import annotations

import torch
from torch import nn

from ...measure import device as dev
from ...measure import profiling, training
from ...notebook import env


class SmallCNN(nn.Module):
    """Conv + batch-norm blocks and a linear head: the model profiled in ``01_profiler_basics``.

    ``width`` channels after the stem, ``blocks`` (conv 3x3, BN, ReLU, max-pool) blocks,
    then global average pooling and a linear layer to ``num_classes``.
    """

    def __init__(self, in_channels: int = 3, width: int = 32, blocks: int = 3, num_classes: int = 10):
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for i in range(blocks):
            out = width * (2 ** i)
            layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            c = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build(device, batch_size: int, *, image_size: int, width: int, blocks: int, precision: str = "fp32",
          seed: int = 0):
    """A fresh SmallCNN, SGD with momentum and one fixed random batch on ``device``; returns ``(model, step)``,
    ``step()`` being the labelled training step (``training.make_train_step``)."""
    env.seed_everything(seed)
    model = SmallCNN(width=width, blocks=blocks).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    return model, training.make_train_step(model, opt, nn.CrossEntropyLoss(), x, y, precision=precision)


def ops_per_step(step, n: int, device) -> list[set[str]]:
    """The ``aten::`` operators each of ``n`` calls of ``step`` ran, each call profiled on its own."""
    env.quiet_profiler_warning()
    out = []
    for _ in range(n):
        with torch.profiler.profile(activities=profiling.activities(device)) as p:
            step()
            dev.synchronize(device)
        out.append({e.key for e in p.key_averages() if e.key.startswith("aten::")})
    return out
