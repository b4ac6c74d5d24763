"""The lab's own commands, apart from the package the notebooks share (``helpers``, which imports nothing from
here): they run the notebooks, set the lab up and carry it to a GPU machine.

- ``runner``      ``make run`` / ``python -m labtools.runner``: the command line (signals kept from its first line)
- ``headless``    every notebook headless, no set-up, results beside the executed copy, a time budget per
                  notebook, stopped cleanly by SIGTERM or Ctrl-C (what ``runner`` runs)
- ``kernel``      one notebook in a kernel of this Python, which the runner can stop
- ``pack``        a notebook's outputs: earlier ones set aside, interrupted ones marked, one archive to carry back;
                  ``python -m labtools.pack unpack`` makes a GPU run's packs the reference
- ``install``     ``make setup``'s install (uv, else pip) of the pinned set; ``devsetup`` its JupyterLab defaults
                  and browser
- ``labcopy``     ``make lab``'s working copies in lab/
- ``wheelhouse``  an offline install's wheels (``make wheelhouse``)
- ``gpukit``      the GPU kit (``make gpu-kit``) and ``gpusim`` the GPU machine simulated offline (docs/gpu.md)
- ``hosted``      a hosted notebook simulated (``make hosted-sim``): README's ``%pip`` line on a given torch, kept
- ``exits``       the exit statuses of these commands, in one place

By hand, in ``benchmarks/``: ``signal_stress`` (the runner signalled at 40 moments) and ``doctor_bench``.
"""
