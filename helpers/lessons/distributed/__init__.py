"""Notebook 06 (``06_distributed``), data-parallel training: the rank's script is written by the notebook's
``%%writefile`` cells; here are its launcher (``launch``), the runs as results rows (``experiment``) and the readings
of the ranks' traces (``views``)."""
from . import experiment, launch, views

__all__ = ["experiment", "launch", "views"]
