"""The models of ``04_torch_compile``: the article's (Swin-T, Swin-B, ConvNeXt-L), small CPU versions of them, a
gated MLP for the smoke matrix (element-wise heavy: what Inductor's CPU code generation fuses), a two-block ViT, and
an MLP with and without a graph break; all randomly initialised (no
downloads), trained on fixed synthetic batches."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ...measure.validate import InvalidValue

MODELS = ("gated_mlp", "vit_tiny", "vit_mini", "swin_t", "swin_b", "convnext_large", "swin_mini", "convnext_mini", "mlp",
          "mlp_break", "mlp_fixed")
# small torchvision configurations of the article's models (see build_small): their code, fewer and narrower blocks
MINI = {"swin_mini": "swin_t", "convnext_mini": "convnext_large"}
# Dynamo's timers that together cover a training compile: the traced frames (which compile

class ClampMLP(nn.Module):
    """Two linear layers with a clamp on the hidden activations.

    ``fixed=False`` checks the activations with ``.item()`` and a Python ``if``: a
    data-dependent branch that Dynamo cannot trace, so the graph breaks there.
    ``fixed=True`` clamps unconditionally, which computes the same values in one graph.
    """

    def __init__(self, in_features: int = 3 * 32 * 32, hidden: int = 256, num_classes: int = 10,
                 fixed: bool = True, limit: float = 6.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)
        self.fixed, self.limit = fixed, limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(torch.flatten(x, 1)))
        if self.fixed:
            h = h.clamp(max=self.limit)
        elif h.max().item() > self.limit:  # .item() + Python if: a graph break
            h = h.clamp(max=self.limit)
        return self.fc2(h)


class GatedBlock(nn.Module):
    """RMSNorm written out, then a SwiGLU gate with a cheap polynomial and a clamp on top, and a scaled residual.

    Few parameters (so the eager optimizer, outside the compiled graph, stays a small share of a step) and many
    element-wise ops on ``batch x hidden`` activations: in eager each is its own operator call and its own pass
    over memory, forward and backward; Inductor fuses each chain into one C++ loop.
    """

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.norm_weight = nn.Parameter(torch.ones(width))
        self.up = nn.Linear(width, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        self.scale = nn.Parameter(torch.full((width,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        a, b = self.up(n).chunk(2, dim=-1)
        g = a * torch.sigmoid(a) * b                  # SwiGLU: SiLU(a) * b
        g = (g + 0.044715 * g * g * g).clamp(-8, 8)   # more element-wise work, as in GELU's tanh form
        return x + self.scale * self.down(g)


class GatedMLP(nn.Module):
    """Flattened images -> ``width`` -> ``depth`` gated blocks (``GatedBlock``, ``hidden`` wide) -> classes."""

    def __init__(self, in_features: int, width: int = 32, hidden: int = 512, depth: int = 2, num_classes: int = 10):
        super().__init__()
        self.inp = nn.Linear(in_features, width)
        self.blocks = nn.Sequential(*[GatedBlock(width, hidden) for _ in range(depth)])
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.inp(torch.flatten(x, 1))))


def validate_model(name: Any) -> str:
    if name not in MODELS:
        raise InvalidValue(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}.")
    return name


def build_model(name: str, image_size: int = 224, num_classes: int = 10, hidden: int = 256) -> nn.Module:
    """A randomly initialised model by name (no downloads: ``pretrained=False`` / ``weights=None``)."""
    validate_model(name)
    if name == "gated_mlp":  # width 32: narrow matrix products, so the element-wise ops are most of a step
        return GatedMLP(3 * image_size * image_size, 32, hidden, 2, num_classes)
    if name == "vit_tiny":
        import timm

        return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=image_size,
                                 num_classes=num_classes)
    if name in MINI:
        return build_small(MINI[name], num_classes)
    if name == "vit_mini":  # ViT-Tiny's width with two blocks and drop path on: a cheap compile for a CPU
        import timm

        return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=image_size, depth=2,
                                 drop_path_rate=0.1, num_classes=num_classes)
    if name in ("swin_t", "swin_b", "convnext_large"):
        import torchvision

        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    return ClampMLP(3 * image_size * image_size, hidden, num_classes, fixed=(name != "mlp_break"))


def build_small(name: str, num_classes: int = 10) -> nn.Module:
    """A small torchvision Swin or ConvNeXt: the same classes and code paths (stochastic depth included) as
    ``swin_t``/``swin_b``/``convnext_large``, with fewer and narrower blocks, for graph-break hunting on a CPU."""
    from torchvision.models import convnext, swin_transformer

    if name in ("swin_t", "swin_b"):
        return swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                                window_size=[4, 4], stochastic_depth_prob=0.2,
                                                num_classes=num_classes)
    if name == "convnext_large":
        return convnext.ConvNeXt([convnext.CNBlockConfig(32, 64, 2), convnext.CNBlockConfig(64, None, 2)],
                                 stochastic_depth_prob=0.2, num_classes=num_classes)
    raise InvalidValue(f"no small configuration of {name!r}; choose swin_t, swin_b or convnext_large.")


def synthetic_batches(n: int, batch_size: int, image_size: int, num_classes: int = 10, seed: int = 0,
                      device=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``n`` fixed random (images, labels) batches: the same data for every cell of the matrix."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(batch_size, 3, image_size, image_size, generator=g)
        y = torch.randint(0, num_classes, (batch_size,), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


