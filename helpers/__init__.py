"""PyTorch Performance Lab: the package the notebooks share, the lessons apart.

Importing it (or any of its packages) has no side effects. Each package's docstring names its modules: ``measure``
(timing, profiling, a labelled training step, comparisons, validation), ``lessons`` (what one notebook alone uses),
``notebook`` (around the lessons); ``project`` is the project's folder and where runs go, for both. The lab's own
commands (the headless runner of ``make run``, the set-up, the GPU kit) are ``labtools``, beside this package, which
imports nothing from it. The trace toolkit and its command line (``perf-doctor PATH``) are a package of their own,
``perf_doctor`` (doctor/ in this repository), which the lab imports and which imports nothing from it.
"""

__version__ = "0.1.0"
