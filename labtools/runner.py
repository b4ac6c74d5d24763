"""``python -m labtools.runner`` (``make run``): execute the notebooks headless; see ``labtools.headless``."""

import signal
import sys

# A signal that arrives while the runner is still importing (a second or more on a loaded machine) is kept, not
# fatal: the run then starts no notebook and writes its summary (``labtools.headless.main`` reads it).
EARLY_SIGNALS: list = []
for _s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(_s, lambda signum, frame: EARLY_SIGNALS.append(signum))

from .headless import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(early_signals=EARLY_SIGNALS))
