"""Benchmarks and stress runs, by hand, never by ``make test`` (their figures depend on the machine):
``doctor_bench``, the doctor timed on a large trace (``python benchmarks/doctor_bench.py`` or
``python -m benchmarks.doctor_bench``), ``doctor_accuracy``, the doctor's confusion matrix and savings on a
labelled corpus, written into docs/doctor.md (``python benchmarks/doctor_accuracy.py [--rounds 20] [--repeats 2]
[--no-write]`` or ``python -m benchmarks.doctor_accuracy``), ``cluster_bench``, a folder of ranks read by local
processes and by a Dask LocalCluster (``python benchmarks/cluster_bench.py``), and ``signal_stress``, the runner
signalled at 40 moments
(``python benchmarks/signal_stress.py`` or ``python -m benchmarks.signal_stress``)."""
