"""Set-up and maintenance tools, apart from the lessons.

- ``install``       ``make setup``'s install of the pinned set: uv (pip's settings carried over), pip as the fallback
- ``devsetup``      JupyterLab defaults and the browser for the real-browser test (``make setup``)
- ``wheelhouse``    the wheels for an offline install (``make wheelhouse``)
- ``gpukit``        the few wheels a borrowed GPU machine needs to run the notebooks (``make gpu-kit``, gpu-kit.txt)
- ``gpusim``        that machine simulated here, offline (``make gpu-sim``)
- ``labcopy``       ``make lab``'s working copies of the notebooks (lab/, git-ignored)
- ``idle``          a command at the lowest CPU priority (``make test``'s trace tests beside the notebooks)
- ``doctor_bench``  the doctor on a 200 MB trace, timed (run by hand: ``python -m helpers.tools.doctor_bench``)
- ``signal_stress`` the runner signalled at 40 moments, hangs reported (run by hand:
                    ``python -m helpers.tools.signal_stress``)
"""
