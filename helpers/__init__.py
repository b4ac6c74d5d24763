"""PyTorch Performance Lab: the package the notebooks share (no side effects on import): ``measure`` (timing,
profiling, comparisons), ``lessons`` (what one notebook alone uses), ``notebook`` (around the lessons) and
``project`` (the project's folder, where runs go). The lab's commands are ``labtools``; the trace toolkit is
``perf_doctor`` (doctor/), which imports nothing from this package."""

__version__ = "0.1.0"
