"""Notebook 04's matrix: ``models``, ``cells`` (one training run per model × precision × mode), ``dynamo`` (compile
time, counters, logs, caches), ``tables`` (speed-ups, parity, break-even), ``starts`` (cold and warm fresh processes)."""

from .models import (
    MODELS, MINI, ClampMLP, validate_model, build_model, build_small, synthetic_batches,
)
from .dynamo import (
    COMPILE_TIMERS, dynamo_times, compile_seconds, graph_counters, use_inductor_cache, tf32_settings,
    random_parity, dynamo_logs, quiet_known_noise, explain_summary,
)
from .cells import (
    CompileFailed, check_cell, run_cell, profile_cell, cell_name, record_cell,
)
from .tables import (
    break_even_steps, break_even_whole_run, whole_run_s, loss_parity, speedup_table,
)
from .starts import (
    start_run, cold_warm_start,
)
