"""``python -m helpers.lessons.torch_compile SPEC``: one compiled cell in a fresh process (``starts.start_run``)."""
import sys

from .starts import child_main

child_main(sys.argv[1:])
