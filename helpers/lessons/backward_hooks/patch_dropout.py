"""timm's ``PatchDropout`` with the kept patches selected by indexing (backward ``IndexBackward0``) instead of
``gather`` (``GatherBackward0``); notebook 03."""

import torch
from torch import nn
from timm.layers import PatchDropout

METHODS = ("gather", "indexing")


def select_by_index(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The fix: flat indices ``idx + row * L`` into the ``(B*L, D)`` view of ``x`` (B, L, D)."""
    b, length = x.shape[:2]
    flat = (idx + torch.arange(b, device=x.device).unsqueeze(1) * length).reshape(-1)
    return x.reshape(b * length, *x.shape[2:])[flat].reshape(b, idx.shape[1], *x.shape[2:])


class IndexingPatchDropout(PatchDropout):
    """timm's ``PatchDropout``, the kept patches (drawn as timm draws them) selected by ``select_by_index``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.prob == 0.0:
            return x
        prefix = None
        if self.num_prefix_tokens:
            prefix, x = x[:, : self.num_prefix_tokens], x[:, self.num_prefix_tokens :]
        b, length = x.shape[:2]
        keep = max(1, int(length * (1.0 - self.prob)))
        idx = torch.argsort(torch.randn(b, length, device=x.device), dim=-1)[:, :keep]
        x = select_by_index(x, idx.sort(dim=-1)[0] if self.ordered else idx)
        return torch.cat((prefix, x), dim=1) if prefix is not None else x


def set_patch_dropout(model: nn.Module, method: str) -> nn.Module:
    """Make ``model.patch_drop`` select by ``method``, keeping its settings and training mode; returns the model."""
    if method not in METHODS:
        raise ValueError(
            f"unknown patch-dropout method {method!r}; choose one of {', '.join(METHODS)}"
        )
    old = getattr(model, "patch_drop", None)
    if not isinstance(old, PatchDropout):
        raise ValueError(
            f"{type(model).__name__}.patch_drop is {type(old).__name__}, not a timm PatchDropout: "
            "build the VisionTransformer with patch_drop_rate > 0"
        )
    new = (IndexingPatchDropout if method == "indexing" else PatchDropout)(
        old.prob, num_prefix_tokens=old.num_prefix_tokens, ordered=old.ordered
    )
    model.patch_drop = new.train(old.training)
    return model
