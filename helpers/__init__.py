"""PyTorch Performance Lab: the thin, tested helpers the notebooks share.

One concern per module; importing the package has no side effects:

- ``helpers.env``        device, scale, seeding, deterministic mode, environment summary
- ``helpers.timing``     warm-up, synchronised step timing, median and interquartile range
- ``helpers.profiling``  torch.profiler with schedules, key_averages tables, trace export
- ``helpers.results``    the growing results table, results.json, figures
- ``helpers.widgets``    the ipywidgets panel that re-runs an experiment with the reader's values
- ``helpers.tensorboard`` TensorBoard logging and the inline ``%tensorboard`` view
- ``helpers.trace``      reading profiler traces: sync counts and costs, DataLoader wait share, offline views
- ``helpers.models``     small models used by the notebooks
"""

__version__ = "0.1.0"
