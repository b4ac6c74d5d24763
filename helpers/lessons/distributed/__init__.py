"""Notebook 06, data-parallel training: the ranks' program, their launcher, and the readings of their traces.

- ``train``     one rank (``python -m helpers.lessons.distributed.train``, or under ``torchrun``): the MLP, the
                timed rounds (single process, DDP, straggler, accumulation with and without ``no_sync``) and the
                profiles, one trace file per rank per experiment
- ``launch``    ranks started as processes from the notebook: ranks against cores, a free port, a timeout, a dead
                rank's failed row, no process left behind; the ``torchrun`` command
- ``harness``   one job as results rows; the comparisons and the counts the checks read; the panel's validator
- ``readings``  all-reduces per step from the traces, the doctor's communication split, DDP's overhead table, the
                bucket sweep, HTA's overlap
"""
from . import harness, launch, readings
from .harness import run_job, validate_config

__all__ = ["harness", "launch", "readings", "run_job", "validate_config"]
