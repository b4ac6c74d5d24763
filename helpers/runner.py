"""``python -m helpers.runner`` (``make run``): execute the notebooks headless; see ``helpers.notebook.runner``."""

import signal
import sys

# A signal that arrives while the runner is still importing (a second or more on a loaded machine) is kept, not
# fatal: the run then starts no notebook and writes its summary (``helpers.notebook.runner.main`` reads it).
EARLY_SIGNALS: list = []
for _s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_s, lambda signum, frame: EARLY_SIGNALS.append(signum))

from .notebook.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(early_signals=EARLY_SIGNALS))
