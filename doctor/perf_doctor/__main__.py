"""``python -m perf_doctor PATH`` (and ``... compare BEFORE AFTER``): the same command as ``perf-doctor``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
