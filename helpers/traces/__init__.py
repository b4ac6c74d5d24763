"""The trace toolkit: read any PyTorch profiler trace offline, view it, diagnose its steps.

No server and no network: a ``.json`` / ``.json.gz`` Chrome trace or a ``tensorboard_trace_handler`` folder, from
any job. Computing is apart from drawing (as Holistic Trace Analysis keeps plots behind a flag): every function
returns numbers or DataFrames; ``Trace.timeline`` and ``show`` draw.

- ``files``      which trace files a path holds: ``find_trace`` (one), ``find_workers`` (a folder of ranks),
                 ``TraceError``
- ``load``       ``load_trace`` (bounded reading: ``max_trace_bytes``), ``trim`` (a long trace cut to its first
                 steps)
- ``stream``     ``read_trimmed``: the first steps of a trace of any size, streamed in bounded memory (the doctor's
                 reader; ``progress_to`` shows a long read's progress on stderr)
- ``events``     the one category table (old and new Kineto schemas; CUDA, ROCm, MTIA, XPU): host or device,
                 steps, phases, DataLoader waits, launches paired with their device work
- ``intervals``  interval arithmetic (merge, clip, intersect, subtract, length)
- ``syncs``      host-device synchronisations, each counted once, and what each cost
- ``views``      ``open_trace`` / ``Trace``: overview, operators, kernels, memory (torch-tb-profiler's parser),
                 GPU time, idle and launch statistics (Holistic Trace Analysis)
- ``kernels``    kernel names read: ``short_name`` (for tables), ``uses_tensor_cores`` and ``kernel_dtype``
                 (classified from the name, NVIDIA and AMD)
- ``throughput`` ``op_throughput``: achieved TFLOP/s of matmul/conv ops with recorded shapes against
                 ``PEAK_TFLOPS`` (the vendors' data sheets), and the TF32 advice
- ``timeline``   a Perfetto-like picture of a few steps (the profiling loop's own syncs drawn apart: ``sync_split``)
- ``show``       the views in a notebook (plain tables and lines; ``helpers.notebook.display`` renders them)
- ``diagnosis``  ``diagnose``: the average step split into causes (input, host sync, launch/overhead, compute,
                 memory, communication), each microsecond to one cause
- ``memory``     ``memory_report``: a profile_memory=True trace's peak allocated per device and top allocating operators
- ``gaps``       ``idle_causes``: the GPU's idle time in the steps by what the host was doing (waiting for data,
                 host sync and its operator, allocator, communication, launch queue, overhead, nothing recorded)
- ``split``      the interval work behind it: a trace's steps split into each cause's time ranges (GPU and CPU)
- ``quality``    ``assess``: is a trace fit to be diagnosed (steps, warm-up, kernels, ranks, categories, times)
- ``gputime``    the GPU's temporal breakdown computed here, with Holistic Trace Analysis' definitions
- ``report``     one trace's report (``trace_report``: quality, Overview, GPU, diagnosis) and its text
- ``job``        ``diagnose_job``: a folder of ranks, every rank diagnosed, the straggler, one verdict
- ``doctor``     ``python -m helpers.doctor PATH``: all of it from the command line (``compare BEFORE AFTER``,
                 which needs the notebooks' comparison, is ``helpers.measure.trace_compare``)
- ``backward``   a backward pass read from a trace: two clocks per autograd node, a node's forward op and line
"""
from .backward import backward_ops, forward_origin
from .diagnosis import CAUSES, Diagnosis, DiagnosisError, diagnose
from .events import dataloader_wait_share, has_gpu, phase_ranges, step_ranges
from .files import find_workers
from .job import diagnose_job
from .load import TraceError, find_trace, load_trace, trim
from .show import show
from .syncs import KINDS, count_syncs, sync_costs
from .views import Trace, open_trace

__all__ = ["CAUSES", "Diagnosis", "DiagnosisError", "KINDS", "Trace", "TraceError", "backward_ops",
           "count_syncs", "dataloader_wait_share", "diagnose", "diagnose_job", "find_trace", "find_workers",
           "forward_origin", "has_gpu",
           "load_trace", "open_trace", "phase_ranges", "show", "step_ranges", "sync_costs", "trim"]
