"""The lesson of notebook ``02_data_pipeline``: ``transforms`` (what the DataLoader workers run), ``experiment``
(interleaved rows, comparisons, profiles, the panel), ``views`` (tables, charts) and ``checks`` (its claims)."""

from . import experiment, transforms, views

__all__ = ["experiment", "transforms", "views"]
