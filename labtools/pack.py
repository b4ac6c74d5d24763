"""A notebook's outputs kept honest and carried back in one file (``labtools.runner``).

``set_aside`` moves a notebook's previous outputs to ``<out>/<stem>.previous/``; ``mark_interrupted`` marks a
stopped notebook's results.json; ``pack`` writes ``<stem>.tar.gz`` (outputs, and this run's traces smallest first
within a cap, the rest listed in ``pack.json``); ``unpack`` makes it a reference run (traces gzipped, none over 2 MiB).
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

from helpers.notebook.results import atomic_write_text, current_umask

from . import exits

MIB = 2**20
PACK_LIMIT = 15 * MIB  # each archive stays under what one carried file may be (16 MiB)
TRACE_GZ_LIMIT = (
    2 * MIB
)  # a reference keeps a trace only this small, gzipped (issue 31: the whole <= 15 MB)
TRACE_SUFFIXES = (".json", ".json.gz")


def set_aside(out: Path, stem: str) -> Path | None:
    """Move ``<out>/<stem>/`` to ``<out>/<stem>.previous/`` (replacing an older one). Returns where, or None."""
    src = Path(out) / stem
    if not src.exists():
        return None
    dest = Path(out) / f"{stem}.previous"
    if dest.exists():
        shutil.rmtree(dest)
    src.rename(dest)
    return dest


def mark_interrupted(results_dir: Path, reason: str) -> bool:
    """Add ``"interrupted": true`` and the reason to ``results_dir/results.json``. False when there is none."""
    path = Path(results_dir) / "results.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    doc["interrupted"] = True
    doc["interruption"] = reason
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return True


def new_traces(runs: Path, since: float) -> list[Path]:
    """Profiler traces (``*.json``, ``*.json.gz``) under ``runs/traces`` modified at or after ``since`` (Unix time)."""
    base = Path(runs) / "traces"
    if not base.is_dir():
        return []
    return sorted(
        p
        for p in base.rglob("*")
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.stat().st_mtime >= since - 1
    )


def _gz_size(path: Path) -> int:
    data = path.read_bytes()
    return len(data) if path.name.endswith(".gz") else len(gzip.compress(data, compresslevel=6))


def pack(
    results_dir: Path,
    dest: Path,
    traces: list[Path] | None = None,
    traces_root: Path | None = None,
    limit: int = PACK_LIMIT,
) -> dict[str, Any]:
    """Write ``dest`` (``<stem>.tar.gz``): the files of ``results_dir`` (not sub-folders) and the ``traces`` (paths
    kept relative to ``traces_root``), traces smallest first while the archive stays under ``limit`` bytes.
    Returns the manifest (also stored in the archive as ``<stem>/pack.json``)."""
    results_dir, dest = Path(results_dir), Path(dest)
    stem = results_dir.name
    files = sorted(p for p in results_dir.iterdir() if p.is_file()) if results_dir.is_dir() else []
    kept, left_out, room = [], [], limit - sum(_gz_size(p) for p in files) - 64 * 1024
    for size, path in sorted(
        ((_gz_size(p), p) for p in traces or []), key=lambda t: (t[0], str(t[1]))
    ):
        rel = path.relative_to(traces_root) if traces_root else Path(path.name)
        if size <= room:
            kept.append((path, rel))
            room -= size
        else:
            left_out.append({"trace": str(rel), "bytes": path.stat().st_size})
    manifest = {
        "notebook": stem,
        "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": [p.name for p in files],
        "traces": [str(rel) for _, rel in kept],
        "traces_left_out": left_out,
        "limit_bytes": limit,
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    mode = 0o666 & ~current_umask()
    with tarfile.open(tmp, "w:gz") as tar:
        for p in files:
            tar.add(p, arcname=f"{stem}/{p.name}")
        for path, rel in kept:
            tar.add(path, arcname=f"{stem}/traces/{rel.as_posix()}")
        data = (json.dumps(manifest, indent=2) + "\n").encode()
        info = tarfile.TarInfo(f"{stem}/pack.json")
        info.size, info.mtime, info.mode = len(data), int(time.time()), mode
        tar.addfile(info, io.BytesIO(data))
    tmp.chmod(mode)
    tmp.replace(dest)
    manifest["bytes"] = dest.stat().st_size
    return manifest


def unpack(
    archive: Path, dest_root: Path, trace_limit: int | None = TRACE_GZ_LIMIT
) -> tuple[Path, list[str]]:
    """Extract a ``pack`` archive under ``dest_root`` (plain files under ``<stem>/`` only), traces and the executed
    copy gzipped (no tracked notebook has outputs), traces over ``trace_limit`` left out: ``(folder, left out)``."""
    archive, dest_root = Path(archive), Path(dest_root)
    left_out: list[str] = []
    with tarfile.open(archive, "r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        stems = {Path(m.name).parts[0] for m in members}
        if len(stems) != 1:
            raise ValueError(f"{archive}: not one notebook's pack (top folders {sorted(stems)})")
        stem = stems.pop()
        for m in members:
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts:
                raise ValueError(f"{archive}: unsafe path {m.name!r}")
            target = dest_root.joinpath(*parts)
            data = tar.extractfile(m).read()
            is_trace = len(parts) > 2 and parts[1] == "traces" and m.name.endswith(TRACE_SUFFIXES)
            if (is_trace and not m.name.endswith(".gz")) or m.name.endswith(".ipynb"):
                data, target = (
                    gzip.compress(data, compresslevel=9, mtime=0),
                    target.with_name(target.name + ".gz"),
                )
            if is_trace and trace_limit is not None and len(data) > trace_limit:
                left_out.append(
                    f"{Path(*parts[2:]).as_posix()} ({len(data) / MIB:.1f} MiB gzipped)"
                )
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    folder = dest_root / stem
    if left_out:
        manifest = folder / "pack.json"
        doc = json.loads(manifest.read_text()) if manifest.is_file() else {}
        doc["unpack_left_out"] = left_out
        atomic_write_text(manifest, json.dumps(doc, indent=2) + "\n")
    return folder, left_out


def main(argv: list[str] | None = None) -> int:
    """``python -m labtools.pack unpack --gpu h100 ARCHIVE ...``: a GPU run's packs become its reference."""
    import argparse

    from helpers.notebook.reference import reference_root

    ap = argparse.ArgumentParser(
        prog="python -m labtools.pack",
        description="Unpack a GPU run's per-notebook packs as reference runs.",
    )
    ap.add_argument("command", choices=("unpack",))
    ap.add_argument("archives", nargs="+", type=Path)
    ap.add_argument("--gpu", required=True, help="the reference's folder name, e.g. h100")
    ap.add_argument("--root", type=Path, help="default: $PERF_REFERENCE_DIR, else data/reference")
    ap.add_argument(
        "--trace-limit-mb",
        type=float,
        default=TRACE_GZ_LIMIT / MIB,
        help="leave out a trace larger than this, gzipped (default 2; 0: keep every trace)",
    )
    args = ap.parse_args(argv)
    dest = (args.root or reference_root()) / args.gpu
    limit = int(args.trace_limit_mb * MIB) if args.trace_limit_mb > 0 else None
    for archive in args.archives:
        try:
            folder, left = unpack(archive, dest, trace_limit=limit)
            print(
                f"{archive} -> {folder}"
                + (f" (left out, too large: {'; '.join(left)})" if left else "")
            )
        except (OSError, ValueError, tarfile.TarError) as exc:
            print(f"{archive}: {exc}")
            return exits.BAD_INPUT
    return exits.OK


if __name__ == "__main__":
    import sys

    sys.exit(main())
