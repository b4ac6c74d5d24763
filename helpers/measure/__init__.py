"""Measuring a training step, the toolkit every notebook times and profiles with: ``device``, ``timing``,
``profiling`` (``torch.profiler``), ``training`` (a labelled step), ``diagnose``, ``compare`` (equivalence, timings),
``validate`` (``InvalidValue``). Two traces' steps are compared by the doctor (``perf_doctor.compare``)."""
