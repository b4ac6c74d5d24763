"""perf-doctor, the trace toolkit: read any PyTorch profiler trace offline, view it, diagnose its steps.

No server, no network and no torch: a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler``
folder, from any job. Computing is apart from drawing (as Holistic Trace Analysis keeps plots behind a flag): every
function returns numbers or DataFrames; ``Trace.timeline`` and ``show`` draw. It imports nothing from the lab
(``helpers``), which imports it.

- ``files`` / ``load`` / ``stream``: which trace files a path holds (``find_trace``, ``find_workers``); reading
  (``load_trace``, ``max_trace_bytes``), ``trim`` to the first steps; ``read_trimmed``, the doctor's streamed reader
- ``events``: the one category table (old and new Kineto schemas; CUDA, ROCm, MTIA, XPU), steps, phases, launches;
  ``intervals``: interval arithmetic; ``syncs``: host-device synchronisations, each counted once, and their cost
- ``views``: ``open_trace`` / ``Trace``: torch-tb-profiler's and HTA's views; ``timeline`` draws; ``show`` in a notebook
- ``kernels``: kernel names read (``short_name``, ``uses_tensor_cores``, ``kernel_dtype``); ``throughput``: achieved
  TFLOP/s of matmul/conv ops against ``PEAK_TFLOPS``; ``memory``: a profile_memory=True trace's peaks and allocators
- ``diagnosis``: ``diagnose``, the average step split into causes (the interval work in ``split``); ``gaps``: the GPU's
  idle time by what the host was doing; ``quality``: is a trace fit; ``gputime``: the GPU's breakdown (HTA's terms)
- ``report``: one trace's report and its text; ``job``: a folder of ranks, the straggler, one verdict; ``compare``:
  ``compare_traces``, two traces' steps compared (``stats``: the ratio, its interval, the noise floor and the
  verdict); ``cli``: the command line, ``perf-doctor PATH`` or ``compare BEFORE AFTER``, and the exit statuses
  (``EXIT_CODES``); ``backward``: two clocks per autograd node, a node's forward op and line
- ``cluster``: a job's ranks read on a Dask cluster, an existing one or a local one (``dask_ranks``; the ``[dask]``
  extra), reduced to the same job report
"""

from .backward import backward_ops, forward_origin
from .compare import compare_traces
from .diagnosis import CAUSES, Diagnosis, DiagnosisError, diagnose
from .events import dataloader_wait_share, has_gpu, phase_ranges, step_ranges
from .files import find_workers
from .job import diagnose_job
from .load import TraceError, find_trace, load_trace, trim
from .show import show
from .syncs import KINDS, count_syncs, sync_costs
from .views import Trace, open_trace

__all__ = [
    "CAUSES",
    "Diagnosis",
    "DiagnosisError",
    "KINDS",
    "Trace",
    "TraceError",
    "backward_ops",
    "compare_traces",
    "count_syncs",
    "dataloader_wait_share",
    "diagnose",
    "diagnose_job",
    "find_trace",
    "find_workers",
    "forward_origin",
    "has_gpu",
    "load_trace",
    "open_trace",
    "phase_ranges",
    "show",
    "step_ranges",
    "sync_costs",
    "trim",
]
