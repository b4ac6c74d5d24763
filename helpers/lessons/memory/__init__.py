"""The helpers of notebook ``07_memory``: ``experiment`` (numbers only), ``checks`` (its claims). MemTracker,
FakeTensorMode, checkpointing, autocast, the optimizers and the CUDA snapshot are in the notebook's cells."""

from .experiment import (
    CATEGORIES,
    MB,
    MemoryInputError,
    PeakOnlyTracker,
    by_category,
    capacity_mb,
    check_fits,
    error_pct,
    largest_batch,
    levers_left,
    live_mb,
    module_peaks,
    profiler_peak_mb,
    read_snapshot,
    snapshot_summary,
)

__all__ = [
    "CATEGORIES",
    "MB",
    "MemoryInputError",
    "PeakOnlyTracker",
    "by_category",
    "capacity_mb",
    "check_fits",
    "error_pct",
    "largest_batch",
    "levers_left",
    "live_mb",
    "module_peaks",
    "profiler_peak_mb",
    "read_snapshot",
    "snapshot_summary",
]
