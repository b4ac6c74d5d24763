"""The lesson of notebook 02 (``02_data_pipeline``): ``transforms`` (what the DataLoader workers run: the dataset,
the transforms of each variant, the collates, the checks before a worker starts), ``experiment`` (rows timed in
interleaved rounds, comparisons, profiles, the idle share, the panel) and ``views`` (its tables and charts)."""
from . import experiment, transforms, views
from .experiment import StandIn, make_trainer, summarize
from .transforms import (
    VARIANTS, Compose, ConvertColor, CropParams, ImageDataset, RandomMask, Scale, check_decode, check_settings,
    collate_batch_transforms, collate_bytes, decode_on_device, dilate_convolve, dilate_shift, load_image,
    sample_paths, worker_errors,
)

__all__ = ["experiment", "transforms", "views", "StandIn", "make_trainer", "summarize", "VARIANTS", "Compose",
           "ConvertColor", "CropParams", "ImageDataset", "RandomMask", "Scale", "check_decode", "check_settings",
           "collate_batch_transforms", "collate_bytes", "decode_on_device", "dilate_convolve", "dilate_shift",
           "load_image", "sample_paths", "worker_errors"]
