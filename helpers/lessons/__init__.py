"""What only one notebook uses: one package per lesson, each of the same small shape — ``experiment`` (its runs: rows
timed in interleaved rounds, comparisons, the panel's experiment), ``views`` (its tables and charts) and at most a
topic module or two. The technique each lesson teaches is written in its notebook's cells, not here; these return
figures, frames and comparisons, and the notebooks' markdown explains them.

The packages, by notebook (each one's docstring says what it holds): ``profiler_basics`` (01), ``data_pipeline``
(02), ``backward_hooks`` (03), ``torch_compile`` (04), ``diagnose`` (05), ``distributed`` (06), ``memory`` (07).
"""
