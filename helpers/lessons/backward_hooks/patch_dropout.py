"""Patch dropout without ``torch.gather``: select the kept patches by flat indexing.

Taught in ``03_backward_hooks``. timm's ``PatchDropout`` keeps a random subset of the
patch tokens with ``x.gather(1, idx.expand(-1, -1, D))``; its backward is
``GatherBackward``, which on CUDA in deterministic mode took a synchronising path in the
PyTorch release the source article used. ``IndexingPatchDropout`` draws the same
indices (same random calls, so the same seed gives the same patches) and selects them
by offsetting each row's indices by ``row * L`` and indexing the ``(B*L, D)`` view: its
backward is ``IndexBackward0`` (an ``index_put_`` with accumulation) instead.

``timm_selection_code`` finds where this timm selects the kept patches: the function
``timm.layers.patch_dropout.patch_dropout_forward`` (timm 1.0.31 has it) or, in releases
without it (1.0.15), ``PatchDropout.forward`` itself; both live in ``timm/layers/patch_dropout.py``.
"""
from __future__ import annotations

import torch
from torch import nn
from timm.layers import PatchDropout

METHODS = ("gather", "indexing")


def timm_selection_code():
    """Where this timm picks the kept patches with ``gather``: ``(obj, what)``, ``obj`` the function to show and
    ``what`` a sentence naming it. ``patch_dropout_forward`` when this timm has it (``PatchDropout.forward`` calls
    it), else ``PatchDropout.forward``, which then holds the gather itself."""
    from timm.layers import patch_dropout as timm_pd

    fn = getattr(timm_pd, "patch_dropout_forward", None)
    if fn is not None:
        return fn, ("timm's `PatchDropout.forward` calls `timm.layers.patch_dropout.patch_dropout_forward`, shown "
                    "below")
    return timm_pd.PatchDropout.forward, ("this timm has no `patch_dropout_forward` (timm 1.0.31 has it), so below "
                                          "is `PatchDropout.forward` itself, which selects the patches")


def keep_indices(batch: int, length: int, prob: float, ordered: bool, device) -> torch.Tensor:
    """The kept patch positions, drawn exactly as timm draws them (argsort of Gaussian noise)."""
    num_keep = max(1, int(length * (1.0 - prob)))
    idx = torch.argsort(torch.randn(batch, length, device=device), dim=-1)[:, :num_keep]
    return idx.sort(dim=-1)[0] if ordered else idx


def select_by_gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """timm's way: ``x.gather(1, idx[..., None].expand(-1, -1, D))`` for ``x`` of shape (B, L, D)."""
    return x.gather(1, idx.unsqueeze(-1).expand((-1, -1) + x.shape[2:]))


def select_by_index(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The article's fix: flat indices ``idx + row * L`` into the ``(B*L, D)`` view of ``x``."""
    b, length = x.shape[:2]
    flat = (idx + torch.arange(b, device=x.device).unsqueeze(1) * length).reshape(-1)
    return x.reshape(b * length, *x.shape[2:])[flat].reshape(b, idx.shape[1], *x.shape[2:])


class IndexingPatchDropout(PatchDropout):
    """timm's ``PatchDropout`` with the kept patches selected by indexing instead of ``gather``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.prob == 0.0:
            return x
        prefix = None
        if self.num_prefix_tokens:
            prefix, x = x[:, :self.num_prefix_tokens], x[:, self.num_prefix_tokens:]
        idx = keep_indices(x.shape[0], x.shape[1], self.prob, self.ordered, x.device)
        x = select_by_index(x, idx)
        return torch.cat((prefix, x), dim=1) if prefix is not None else x


def set_patch_dropout(model: nn.Module, method: str) -> nn.Module:
    """Make ``model.patch_drop`` (a timm VisionTransformer's) select by ``"gather"`` or ``"indexing"``.

    Keeps ``prob``, ``num_prefix_tokens`` and ``ordered``; returns the model. Refuses a model
    without a ``PatchDropout`` (for example ``patch_drop_rate=0``, where it is an ``nn.Identity``).
    """
    if method not in METHODS:
        raise ValueError(f"unknown patch-dropout method {method!r}; choose one of {', '.join(METHODS)}")
    old = getattr(model, "patch_drop", None)
    if not isinstance(old, PatchDropout):
        raise ValueError(f"{type(model).__name__}.patch_drop is {type(old).__name__}, not a timm PatchDropout: "
                         "build the VisionTransformer with patch_drop_rate > 0")
    cls = IndexingPatchDropout if method == "indexing" else PatchDropout
    new = cls(old.prob, num_prefix_tokens=old.num_prefix_tokens, ordered=old.ordered)
    new.train(old.training)
    model.patch_drop = new
    return model
