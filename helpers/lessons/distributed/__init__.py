"""Notebook ``06_distributed`` (data-parallel training; the rank's script is written by its ``%%writefile`` cells):
``launch``, ``experiment`` (runs as rows), ``views`` (trace readings) and ``checks`` (its claims)."""

from . import experiment, launch, views

__all__ = ["experiment", "launch", "views"]
