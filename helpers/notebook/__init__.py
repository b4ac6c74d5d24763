"""What a notebook run needs around its lesson (the runner that executes the notebooks headless is
``labtools``, beside this package).

- ``env``          device, scale (``PERF_SCALE``), seeding, deterministic mode, versions, quiet library logs
- ``sizes``        every notebook's sizes at each scale
- ``results``      the results table that grows as experiments run, results.json, figures
- ``checks``       a lesson's claims as data (id, sentence, rule over results.json), judged in one closing cell
- ``display``      tables for a person (units in headers, integers as integers), a helper's source shown
- ``panels``       the ipywidgets panel that re-runs an experiment with the reader's values
- ``tensorboard``  TensorBoard logging and the inline view, checked (its set-up behind ``prepare()``)
- ``reference``    a reference GPU's run beside the reader's: a results column, its figures and trace, labelled
- ``budget``       a notebook's time budget: skipped rows once it is spent, the running experiment stopped
"""
