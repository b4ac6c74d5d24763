"""``python -m helpers.doctor PATH`` and ``python -m helpers.doctor compare BEFORE AFTER`` (also installed as the
``perf-doctor`` command): the trace toolkit's doctor, ``helpers.traces.doctor``, from the command line."""
import sys

from .traces.doctor import main

if __name__ == "__main__":
    sys.exit(main())
