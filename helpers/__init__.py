"""PyTorch Performance Lab: the package the notebooks share, a toolkit and the lessons apart.

Importing it (or any of its packages) has no side effects. Each package's docstring names its modules:
``traces`` (the trace toolkit: read any profiler trace offline, view and diagnose it; nothing from measure or
notebook), ``measure`` (timing, profiling, a labelled training step, comparisons, validation), ``lessons`` (what one
notebook alone uses), ``notebook`` (around the lessons), ``tools`` (set-up and maintenance). ``doctor`` and
``runner`` are the command lines (``python -m helpers.doctor PATH`` and ``... compare BEFORE AFTER``, ``make run``).
"""

__version__ = "0.1.0"
