"""PyTorch Performance Lab: the package the notebooks share, a toolkit and the lessons apart.

Importing it (or any of its packages) has no side effects.

- ``helpers.traces``    the trace toolkit: read any profiler trace offline (``files``, ``load``, ``events``,
                        ``intervals``, ``syncs``), its views (``views``, ``gputime``, ``timeline``, ``show``), the
                        diagnosis (``quality``, ``diagnosis``, ``split``, ``report``, ``job``,
                        ``doctor``) and backward attribution (``backward``); nothing from measure or notebook
- ``helpers.measure``   timing, profiling, a labelled training step, ``diagnose_step``, comparisons, validation
                        (``device``, ``timing``, ``profiling``, ``training``, ``diagnose``, ``compare``, ``trace_compare``,
                        ``validate``)
- ``helpers.lessons``   what one notebook alone uses: ``profiler_basics`` (01), ``data_pipeline`` (02),
                        ``backward_hooks`` (03), ``torch_compile`` (04), ``diagnose`` (05)
- ``helpers.notebook``  around the lessons: ``env``, ``sizes``, ``results``, ``display``, ``panels``,
                        ``tensorboard``, ``reference``, ``budget``, ``runner``, ``kernel``,
                        ``pack``
- ``helpers.tools``     set-up: ``devsetup``, ``wheelhouse``, ``gpukit``, ``gpusim``; ``doctor_bench`` (the doctor
                        on a 200 MB trace)
- ``helpers.doctor``, ``helpers.runner``: the command lines (``python -m helpers.doctor PATH`` and
                        ``... compare BEFORE AFTER``, ``make run``)
"""

__version__ = "0.1.0"
