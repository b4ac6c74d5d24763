"""Measuring a training step: the toolkit every notebook times and profiles with.

- ``device``     is it CUDA, synchronise, peak memory
- ``timing``     ``time_steps`` (warm-up, CUDA events, first step apart), ``StepTimes`` (mean, median, quartiles,
                 samples/s over the timed window), interleaved rounds in rotation, intra-op threads
- ``profiling``  ``torch.profiler`` with a schedule, fresh trace folders, ``key_averages`` tables and frames,
                 each phase's CPU and GPU time
- ``training``   one training step with its phases labelled (``record_function``)
- ``diagnose``   ``diagnose_step``: profile a step and diagnose its trace in one call; ``training_step`` from your
                 own model, optimizer and loader
- ``compare``    two implementations: equal, close, or how far apart (before anything is timed)
- ``trace_compare``  two traces' steps (``python -m helpers.doctor compare``): ``compare_times`` on the step
                 times, each cause's change in ms
- ``validate``   settings refused with a clear message (``InvalidValue``)
"""
