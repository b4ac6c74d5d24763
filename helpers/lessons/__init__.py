"""What only one notebook uses: one package per lesson, each of the same small shape — ``experiment`` (its runs: rows
timed in interleaved rounds, comparisons, the panel's experiment), ``views`` (its tables and charts) and at most a
topic module or two. The technique each lesson teaches is written in its notebook's cells, not here; these return
figures, frames and comparisons, and the notebooks' markdown explains them.

- ``profiler_basics``  (01) the small CNN (``model``); profiler-overhead and two-timer rounds; key_averages views
- ``data_pipeline``    (02) what the DataLoader workers run (``transforms``); rows, ceiling, sweep, idle share
- ``backward_hooks``   (03) the ViT step's runs and matrix; per-module tables; the indexing fix (``patch_dropout``)
- ``torch_compile``    (04) the matrix under its time budget; compile-time and cache bookkeeping (``dynamo``)
- ``diagnose``         (05) each planted bottleneck profiled and diagnosed, and measured against its fix
- ``distributed``      (06) the ranks' launcher (``launch``), the job's rows and comparisons, its traces' readings
- ``memory``           (07) MemTracker's snapshots by category, the profiler's peak, the largest batch, snapshots
"""
