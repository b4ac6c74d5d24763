"""Measuring a training step, the toolkit every notebook times and profiles with: ``device``, ``timing``,
``profiling`` (``torch.profiler``), ``training`` (a labelled step), ``diagnose``, ``compare`` (equivalence, timings),
``trace_compare`` (two traces' steps), ``validate`` (``InvalidValue``)."""
