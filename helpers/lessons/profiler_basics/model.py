"""The small CNN notebook 01 profiles (also 05's model)."""

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Conv-BN-ReLU-max-pool blocks (``width`` doubling) and a linear head."""

    def __init__(
        self, in_channels: int = 3, width: int = 32, blocks: int = 3, num_classes: int = 10
    ):
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for i in range(blocks):
            out = width * (2**i)
            layers += [
                nn.Conv2d(c, out, 3, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            c = out
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.pool(self.features(x)), 1))
