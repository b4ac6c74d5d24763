"""The trace toolkit: read any PyTorch profiler trace offline, view it, diagnose its steps.

No server and no network: a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from
any job. Computing is apart from drawing (as Holistic Trace Analysis keeps plots behind a flag): every function
returns numbers or DataFrames; ``Trace.timeline`` and ``show`` draw.

- ``load``       ``load_trace``, ``find_trace``, ``trim`` (a long trace cut to its first steps), ``TraceError``
- ``events``     the one category table (old and new Kineto schemas; CUDA, ROCm, MTIA, XPU): host or device,
                 steps, phases, DataLoader waits, launches paired with their device work
- ``intervals``  interval arithmetic (merge, clip, intersect, subtract, length)
- ``syncs``      host-device synchronisations, each counted once, and what each cost
- ``views``      ``open_trace`` / ``Trace``: overview, operators, kernels, memory (torch-tb-profiler's parser),
                 GPU time, idle and launch statistics (Holistic Trace Analysis)
- ``timeline``   a Perfetto-like picture of a few steps
- ``show``       the views in a notebook
- ``diagnosis``  ``diagnose``: the average step split into causes (input, host sync, launch/overhead, compute,
                 memory, communication), each microsecond to one cause
- ``split``      the interval work behind it: a trace's steps split into each cause's time ranges (GPU and CPU)
- ``doctor``     ``python -m helpers.doctor PATH``: all of it from the command line
- ``backward``   a backward pass read from a trace: two clocks per autograd node, a node's forward op and line
"""
from .backward import backward_ops, forward_origin
from .diagnosis import CAUSES, Diagnosis, DiagnosisError, diagnose
from .events import dataloader_wait_share, has_gpu, phase_ranges, step_ranges
from .load import TraceError, find_trace, load_trace, trim
from .show import show
from .syncs import KINDS, count_syncs, sync_costs
from .views import Trace, open_trace

__all__ = ["CAUSES", "Diagnosis", "DiagnosisError", "KINDS", "Trace", "TraceError", "backward_ops",
           "count_syncs", "dataloader_wait_share", "diagnose", "find_trace", "forward_origin", "has_gpu",
           "load_trace", "open_trace", "phase_ranges", "show", "step_ranges", "sync_costs", "trim"]
