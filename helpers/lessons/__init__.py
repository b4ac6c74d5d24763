"""What only one notebook uses: one module or package per lesson.

- ``profiler_basics``  (01) the small CNN profiled in the first lesson
- ``data_pipeline``    (02) dataset, transforms and variants; the timed loop, the ceiling and the stand-in device;
                       shared-memory and decode checks
- ``backward_hooks``   (03) backward labels from module hooks (full and graph hooks), spans and per-module tables,
                       patch dropout by indexing; the ViT step's harness (run, profile, read the trace) and readings
- ``torch_compile``    (04) the models, one matrix cell, Dynamo's bookkeeping, break-even arithmetic, fresh-process
                       starts
- ``diagnose``         (05) the planted bottlenecks
"""
