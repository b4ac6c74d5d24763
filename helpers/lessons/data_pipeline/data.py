"""The data side of ``02_data_pipeline``: the dataset, the transforms of each variant, the collates, the move to the
device, and the DataLoader of a variant.

Everything a DataLoader worker needs lives here, at module top level, so that it pickles (workers started with
``spawn`` re-import it). The pipeline variants, fastest last:

- ``baseline``       open + decode (PIL), PILToTensor, RandomCrop, RandomMask (dilation by
                     ``scipy.signal.convolve2d``), ConvertColor (RGB->YUV), Scale (/255)
- ``bool_dilation``  the same, with the dilation done by boolean shifts of a padded mask
- ``crop_first``     RandomCrop on the PIL image before PILToTensor (4x fewer pixels converted)
- ``batch_collate``  ConvertColor + Scale once per batch inside the collate function
- ``uint8_device``   the workers ship uint8 (4x fewer bytes); colour + scale run on the device
- ``gpu_decode``     (CUDA only) workers read the JPEG bytes; ``torchvision.io.decode_jpeg``
                     decodes the batch on the GPU (checked against the CPU decode first), then crop,
                     mask, colour and scale there
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.profiler import record_function
from torch.utils.data import DataLoader, Dataset, default_collate

from ...notebook.env import project_root

VARIANTS = ("baseline", "bool_dilation", "crop_first", "batch_collate", "uint8_device", "gpu_decode")
REGENERATE = "python data/make_sample_images.py"
DATA_DIR = project_root() / "data" / "images"
CROSS = np.array([[0, 1, 0], [1, 1, 1], [0, 1, 0]])

# RGB -> YUV (BT.601, full range), as in the source article: yuv = M @ rgb + offset
YUV_MATRIX = torch.tensor([[0.299, 0.587, 0.114],
                           [-0.168736, -0.331264, 0.5],
                           [0.5, -0.418688, -0.081312]])
YUV_OFFSET = torch.tensor([0.0, 128.0, 128.0])


class ImageLoadError(RuntimeError):
    """An image that is missing or cannot be decoded (the message says which and what to do)."""


# -- data ------------------------------------------------------------------------------------------
def sample_paths(data_dir: Path | str = DATA_DIR) -> list[Path]:
    """The sample JPEGs, or a clear error saying how to make them."""
    d = Path(data_dir)
    paths = sorted(d.glob("*.jpg"))
    if not paths:
        raise FileNotFoundError(f"no sample images in {d}; run `{REGENERATE}` from the project folder to make them.")
    return paths


def load_image(path: Path | str):
    """Open and decode one image as RGB PIL, with a clear message when it is missing or corrupt."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if not p.exists():
        raise ImageLoadError(f"image {p} does not exist; `{REGENERATE}` regenerates the sample images.")
    try:
        with Image.open(p) as im:
            return im.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ImageLoadError(f"image {p} could not be decoded ({type(exc).__name__}: {exc}); it is corrupt or "
                             f"not an image. `{REGENERATE}` regenerates the sample images.") from None


class ImageDataset(Dataset):
    """``length`` samples cycling over ``paths`` (the article: 10,000 paths to one JPEG), random labels.

    ``mode="pil"`` returns ``transform(decoded PIL image)``; ``mode="bytes"`` returns the
    file's bytes as a uint8 tensor (for decoding on the GPU) plus ``transform`` applied to nothing
    (it receives the path). ``die_at=n`` makes a *worker* process exit when it loads its n-th
    sample (counted per worker, so it happens whatever the shuffle order; for the "worker that
    dies" demonstration; in the main process it raises instead).
    """

    def __init__(self, paths: Sequence[Path | str], length: int, transform: Callable | None = None,
                 num_classes: int = 10, seed: int = 0, mode: str = "pil", die_at: int | None = None):
        if not paths:
            raise ValueError("the dataset needs at least one image path")
        if length < 1:
            raise ValueError(f"dataset length must be at least 1 (got {length})")
        self.paths = [str(p) for p in paths]
        self.length = int(length)
        self.transform = transform
        self.mode = mode
        self.die_at = die_at
        self._loaded = 0
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, num_classes, (self.length,), generator=g)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, idx: int):
        self._loaded += 1
        if self.die_at is not None and self._loaded > self.die_at:
            if torch.utils.data.get_worker_info() is not None:
                os._exit(3)  # simulate a crash (segfault, OOM kill) of this worker process
            raise RuntimeError("die_at only kills DataLoader worker processes; here num_workers=0")
        path = self.paths[idx % len(self.paths)]
        if self.mode == "bytes":
            with record_function("read_bytes"):
                if not os.path.exists(path):
                    raise ImageLoadError(f"image {path} does not exist; `{REGENERATE}` regenerates it.")
                # a plain torch-owned uint8 tensor: it moves to the main process through shared memory
                # (torchvision.io.read_file's tensor cannot: "Bad file descriptor" in the worker's queue)
                data = torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8).clone()
            return (data, self.transform(None) if self.transform else None), self.labels[idx]
        with record_function("load_image"):
            img = load_image(path)
        if self.transform is not None:
            img = self.transform(img)
        return img, self.labels[idx]


# -- transforms ------------------------------------------------------------------------------------
class Compose:
    """``torchvision.transforms.Compose`` that wraps each transform in ``record_function(its class name)``."""

    def __init__(self, transforms: Sequence[Callable]):
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            with record_function(type(t).__name__):
                x = t(x)
        return x


def dilate_convolve(mask: np.ndarray) -> np.ndarray:
    """4-neighbour dilation the article's way: a 2-D convolution with a cross kernel (scipy)."""
    from scipy.signal import convolve2d

    return convolve2d(mask.astype(np.uint8), CROSS, mode="same").astype(bool)


def dilate_shift(mask: np.ndarray) -> np.ndarray:
    """The same dilation with boolean shifts of a zero-padded mask: an OR of 5 views, no arithmetic."""
    p = np.pad(mask.astype(bool), 1)
    return p[1:-1, 1:-1] | p[:-2, 1:-1] | p[2:, 1:-1] | p[1:-1, :-2] | p[1:-1, 2:]


DILATIONS = {"convolve2d": dilate_convolve, "bool_shift": dilate_shift}


class RandomMask:
    """Zero a random, dilated set of pixels: mask ~ Bernoulli(ratio), dilated with a 4-neighbour cross."""

    def __init__(self, ratio: float = 0.25, dilation: str = "convolve2d"):
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"mask ratio must be in [0, 1] (got {ratio})")
        if dilation not in DILATIONS:
            raise ValueError(f"unknown dilation {dilation!r}; use one of {', '.join(DILATIONS)}")
        self.ratio, self.dilation = ratio, dilation

    def make_mask(self, h: int, w: int) -> np.ndarray:
        # drawn with torch so the masks follow torch.manual_seed in every process; either generator would differ
        # per worker: each DataLoader worker seeds torch (base_seed + worker id), `random` and numpy's global RNG
        # (np.random.seed of a state derived from base_seed and the worker id: torch/utils/data/_utils/worker.py)
        mask = (torch.rand(h, w) < self.ratio).numpy()
        return DILATIONS[self.dilation](mask)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        mask = torch.from_numpy(self.make_mask(img.shape[-2], img.shape[-1]))
        return img.masked_fill(mask, 0)


_YUV_CACHE: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def yuv_constants(device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(YUV_MATRIX, YUV_OFFSET)`` on ``device``, copied there once and then cached.

    Copying them on every call would be two blocking host-to-device copies per batch on a GPU
    (pageable memory: the host waits for each), hidden inside the device-side variants.
    """
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev not in _YUV_CACHE:
        _YUV_CACHE[dev] = (YUV_MATRIX.to(dev), YUV_OFFSET.to(dev))
    return _YUV_CACHE[dev]


class ConvertColor:
    """RGB -> YUV: a 3x3 matrix on the channel axis plus the offset (0, 128, 128); float32 out.

    Works on one image (C, H, W) or a batch (B, C, H, W) on any device.
    """

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        m, off = yuv_constants(img.device)
        x = img.float()
        # (3, 3) @ (..., 3, H*W): a plain matmul (einsum lowers to a bmm that is slow for tiny CPU inputs)
        return (m @ x.reshape(*x.shape[:-2], -1)).reshape(x.shape) + off[:, None, None]


class Scale:
    """Divide by 255."""

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        return img / 255.0


class PILRandomCrop:
    """RandomCrop on a PIL image (so only the crop is converted to a tensor); errors like torchvision's."""

    def __init__(self, size: int):
        from torchvision.transforms import RandomCrop

        self.crop = RandomCrop(size)

    def __call__(self, img):
        return self.crop(img)


class CropParams:
    """For ``gpu_decode``: draw the crop offsets and the dilated mask in the worker (no pixels yet)."""

    def __init__(self, size: int, image_hw: tuple[int, int], ratio: float = 0.25):
        self.size, self.image_hw, self.mask = size, image_hw, RandomMask(ratio, "bool_shift")

    def __call__(self, _):
        h, w = self.image_hw
        top = int(torch.randint(0, h - self.size + 1, ()))
        left = int(torch.randint(0, w - self.size + 1, ()))
        return torch.tensor([top, left]), torch.from_numpy(self.mask.make_mask(self.size, self.size))


def build_transform(variant: str, crop: int, ratio: float = 0.25, image_hw: tuple[int, int] = (533, 800)):
    """The per-sample transform of each variant (see the module docstring)."""
    from torchvision.transforms import PILToTensor, RandomCrop

    if variant not in VARIANTS:
        raise ValueError(f"unknown pipeline variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if variant == "baseline":
        return Compose([PILToTensor(), RandomCrop(crop), RandomMask(ratio, "convolve2d"), ConvertColor(), Scale()])
    if variant == "bool_dilation":
        return Compose([PILToTensor(), RandomCrop(crop), RandomMask(ratio, "bool_shift"), ConvertColor(), Scale()])
    if variant == "crop_first":
        return Compose([PILRandomCrop(crop), PILToTensor(), RandomMask(ratio, "bool_shift"), ConvertColor(), Scale()])
    if variant in ("batch_collate", "uint8_device"):
        return Compose([PILRandomCrop(crop), PILToTensor(), RandomMask(ratio, "bool_shift")])
    return CropParams(crop, image_hw, ratio)  # gpu_decode


# -- collates --------------------------------------------------------------------------------------
def collate(batch):
    """``default_collate`` inside ``record_function("collate")``."""
    with record_function("collate"):
        return default_collate(batch)


def collate_batch_transforms(batch):
    """Stack uint8 images, then ConvertColor + Scale once for the whole batch."""
    with record_function("collate"):
        x, y = default_collate(batch)
    with record_function("ConvertColor(batch)"):
        x = ConvertColor()(x)
    with record_function("Scale(batch)"):
        x = Scale()(x)
    return x, y


def collate_bytes(batch):
    """For ``gpu_decode``: a list of JPEG byte tensors, crop offsets, masks and labels."""
    with record_function("collate"):
        datas = [b[0][0] for b in batch]
        offsets = torch.stack([b[0][1][0] for b in batch])
        masks = torch.stack([b[0][1][1] for b in batch])
        labels = default_collate([b[1] for b in batch])
    return datas, offsets, masks, labels


def collate_for(variant: str) -> Callable:
    return {"batch_collate": collate_batch_transforms, "gpu_decode": collate_bytes}.get(variant, collate)


# -- on the device ---------------------------------------------------------------------------------
def to_device(batch, variant: str, device, crop: int | None = None):
    """Move a collated batch to ``device`` (non-blocking) and finish the variant's work there.

    Returns ``(x float32 (B, 3, H, W), y)``.
    """
    non_blocking = torch.device(device).type == "cuda"
    with record_function("to_device"):
        if variant == "gpu_decode":
            from torchvision.io import ImageReadMode, decode_jpeg

            datas, offsets, masks, y = batch
            if torch.device(device).type == "cuda":
                # torchvision's CUDA decoder writes on a private stream that does not wait for this one: memory freed
                # here while queued kernels still read it could be overwritten (pytorch/vision#9606, seen on H100s).
                # Our loops synchronise every step, so this wait costs nothing there; it keeps any other caller safe.
                torch.cuda.current_stream(device).synchronize()
            imgs = decode_jpeg(datas, device=device, mode=ImageReadMode.RGB)   # as PIL's convert("RGB"): grey -> 3 channels
            x = torch.stack([im[:, t:t + crop, l:l + crop] for im, (t, l) in zip(imgs, offsets.tolist())])
            x = x.masked_fill(masks.to(device, non_blocking=non_blocking)[:, None], 0)
            x = Scale()(ConvertColor()(x))
            return x, y.to(device, non_blocking=non_blocking)
        x, y = batch
        x = x.to(device, non_blocking=non_blocking)
        y = y.to(device, non_blocking=non_blocking)
        if variant == "uint8_device":
            x = Scale()(ConvertColor()(x))
        return x, y



# -- the DataLoader --------------------------------------------------------------------------------
def make_loader(variant: str, num_workers: int, batch_size: int, *, crop: int, length: int,
                paths: Sequence[Path | str] | None = None, device=None, pin_memory: bool | None = None,
                prefetch_factor: int | None = None, persistent_workers: bool = False,
                die_at: int | None = None, seed: int = 0) -> DataLoader:
    """The DataLoader of a variant (pin_memory defaults to True where the device is CUDA)."""
    paths = list(paths) if paths is not None else sample_paths()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    image_hw = (533, 800)
    if variant == "gpu_decode":
        from PIL import Image

        with Image.open(paths[0]) as im:
            image_hw = (im.height, im.width)
    ds = ImageDataset(paths, length, build_transform(variant, crop, image_hw=image_hw), seed=seed,
                      mode="bytes" if variant == "gpu_decode" else "pil", die_at=die_at)
    kw: dict[str, Any] = {}
    if num_workers > 0:
        kw["persistent_workers"] = persistent_workers
        if prefetch_factor is not None:
            kw["prefetch_factor"] = prefetch_factor
    g = torch.Generator().manual_seed(seed)
    return DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=num_workers, drop_last=True,
                      collate_fn=collate_for(variant), generator=g,
                      pin_memory=(dev.type == "cuda") if pin_memory is None else pin_memory, **kw)


