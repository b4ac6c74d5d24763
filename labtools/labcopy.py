"""Working copies of the notebooks for ``make lab``: ``lab/NN_*.ipynb`` (git-ignored), so that a learner who runs
and saves a notebook writes its outputs there, never into the tracked ``notebooks/``.

``python -m labtools.labcopy [--src notebooks] [--dest lab]``: a missing copy is made; an unchanged copy follows
its notebook; a changed one is kept, with one line saying how to update it (``<dest>/.copies.json`` records them)."""

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

from . import exits

ROOT = Path(__file__).resolve().parents[1]
RECORD = ".copies.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sync(src: Path, dest: Path) -> list[str]:
    """Make or refresh the copies of ``src/[0-9][0-9]_*.ipynb`` in ``dest``; returns one line per notebook."""
    dest.mkdir(parents=True, exist_ok=True)
    record_path = dest / RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    lines = []
    for nb in sorted(src.glob("[0-9][0-9]_*.ipynb")):
        copy, source_sha = dest / nb.name, _sha(nb)
        made = record.get(nb.name, {})
        if not copy.exists():
            what = "copied"
        elif made.get("source") == source_sha:
            lines.append(f"{copy}: yours")
            continue
        elif made.get("copy") == _sha(copy):
            what = "updated (you had not changed it)"
        else:
            lines.append(
                f"{copy}: kept (you changed it); {nb} has changed since: delete your copy for the new one"
            )
            continue
        shutil.copyfile(nb, copy)
        record[nb.name] = {"source": source_sha, "copy": _sha(copy)}
        lines.append(f"{copy}: {what} from {nb}")
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m labtools.labcopy", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--src", type=Path, default=ROOT / "notebooks")
    ap.add_argument("--dest", type=Path, default=ROOT / "lab")
    args = ap.parse_args(argv)
    for line in (ln for ln in sync(args.src, args.dest) if not ln.endswith(": yours")):
        print(line)
    print(
        f"JupyterLab opens your working copies in {args.dest}/ (git-ignored; notebooks/ stays as committed)"
    )
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
