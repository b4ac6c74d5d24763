"""What a notebook run needs around its lesson.

- ``env``          device, scale (``PERF_SCALE``), seeding, deterministic mode, versions, quiet library logs
- ``sizes``        every notebook's sizes at each scale
- ``results``      the results table that grows as experiments run, results.json, figures
- ``display``      tables for a person (units in headers, integers as integers), a helper's source shown
- ``panels``       the ipywidgets panel that re-runs an experiment with the reader's values
- ``tensorboard``  TensorBoard logging and the inline view, checked (its set-up behind ``prepare()``)
- ``budget``       a notebook's time budget: skipped rows once it is spent, the running experiment stopped
- ``runner``       ``make run``: every notebook headless, results beside the executed copy
"""
