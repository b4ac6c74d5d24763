"""Notebook 02's pipeline: ``data`` (dataset, transforms, collates, the DataLoader of a variant), ``checks`` (settings,
/dev/shm, the GPU decode against the CPU's), ``loop`` (the step, the one clock, runs, the ceiling, profiles), ``lab``
(the notebook's harness: ``Lab`` holds the run's settings and results, the stand-in's calibration, the one ceiling,
``measure`` / ``measure_interleaved``, re-profiles, idle shares, the decode bound, bad-input rows, the panel),
``report`` (the tables and charts of ``Lab``'s rows) and ``idle`` (the loop's wait for data read from profiles,
windows in turns)."""

from .data import (
    VARIANTS, REGENERATE, DATA_DIR, CROSS, YUV_MATRIX, YUV_OFFSET, ImageLoadError, sample_paths, load_image,
    ImageDataset, Compose, dilate_convolve, dilate_shift, DILATIONS, RandomMask, yuv_constants, ConvertColor,
    Scale, PILRandomCrop, CropParams, build_transform, collate, collate_batch_transforms, collate_bytes,
    collate_for, to_device, make_loader,
)
from .checks import (
    check_config, clean_worker_error, SHM_PATH, SharedMemoryTooSmall, DecodeMismatch, shm_needed_mb, shm_bytes,
    shm_free_mb, shm_advice, check_shm, compare_decodes, check_decode,
)
from .loop import (
    toy_cnn, make_trainer, StandIn, stand_in_step_ms, make_step, COMPARE, summarize, comparison_ms, cycle_steps, cycle_means,
    predicted_samples_per_s, bound_ms, timed_loop, run_variant, run_interleaved, ceiling, per_sample_ms,
    profile_loop, gpu_idle_share, PROFILE_SORT, STAGES, profile_table, stage_ms,
)
from .report import ARTICLE_STEP_S, TRAIN_COLS, Report
from .lab import NOTEBOOK, Lab
