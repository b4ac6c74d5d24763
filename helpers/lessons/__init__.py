"""What only one notebook uses: one module or package per lesson.

- ``profiler_basics``  (01) the small CNN and the step profiled in the first lesson; readings of its profile (tables
                       that fit, three orders, phase table and chart, backward wait chain); the profiler's cost and
                       the two timers, measured in alternation; the panel's experiment and validator
- ``data_pipeline``    (02) dataset, transforms and variants; the timed loop, the ceiling and the stand-in device;
                       shared-memory and decode checks
- ``backward_hooks``   (03) backward labels from module hooks (full and graph hooks), spans and per-module tables,
                       patch dropout by indexing; the ViT step's harness (run, profile, read the trace) and readings
- ``torch_compile``    (04) the models, one matrix cell, Dynamo's bookkeeping, break-even arithmetic, fresh-process
                       starts; the matrix's harness (time budget, interleaved re-timing), its tables and charts
- ``distributed``      (06) one rank's training under DDP (the same module under ``torchrun``), the ranks' launcher
                       (cores, port, timeout, dead rank), the readings of their traces (all-reduces per step, the
                       doctor's communication split, bucket sweep, HTA) and the job's comparisons
- ``diagnose``         (05) the planted bottlenecks and run_case; the verdicts and saved-vs-claimed tables and chart;
                       the panel's validator; reference GPU traces; the appendix's bad inputs
"""
