"""``python -m helpers.runner`` (``make run``): execute the notebooks headless; see ``helpers.notebook.runner``."""
import sys

from .notebook.runner import main

if __name__ == "__main__":
    sys.exit(main())
