"""Set-up and maintenance tools, apart from the lessons: ``install``, ``devsetup`` (``make setup``), ``wheelhouse``,
``gpukit``, ``gpusim`` (docs/gpu.md), ``labcopy`` (``make lab``), and by hand ``signal_stress``. The doctor's
benchmark is ``benchmarks/doctor_bench.py``."""
