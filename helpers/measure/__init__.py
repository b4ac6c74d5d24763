"""Measuring a training step, the toolkit every notebook times and profiles with: ``device``, ``timing``,
``profiling`` (``torch.profiler``; a step profiled and diagnosed, ``diagnose_step``), ``training`` (a labelled step,
one from your own parts), ``compare`` (equal outputs, timings), ``validate`` (``InvalidValue``, ``check_values``).
Two traces' steps are compared by the doctor (``perf_doctor.compare``)."""
