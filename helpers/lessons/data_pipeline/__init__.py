"""The lesson of notebook ``02_data_pipeline``: ``transforms`` (what the DataLoader workers run), ``experiment``
(interleaved rows, comparisons, profiles, the panel), ``views`` (tables, charts) and ``checks`` (its claims)."""

from . import experiment, transforms, views
from .experiment import StandIn, make_trainer, summarize
from .transforms import VARIANTS, Compose, ConvertColor, CropParams, ImageDataset
from .transforms import RandomMask, Scale, check_decode, check_settings
from .transforms import collate_batch_transforms, collate_bytes, decode_on_device
from .transforms import dilate_convolve, dilate_shift, load_image, sample_paths
from .transforms import worker_errors
