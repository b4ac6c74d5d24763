"""Set-up and maintenance tools, apart from the lessons: ``install``, ``devsetup`` (``make setup``), ``wheelhouse``,
``gpukit``, ``gpusim`` (docs/gpu.md), ``labcopy`` (``make lab``), ``idle`` (``make test``), and by hand
``doctor_bench`` and ``signal_stress``."""
