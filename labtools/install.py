"""``make setup``'s install: the pinned environment into ``.venv``, with uv where it can be had, else with pip.

``python -m labtools.install --python .venv/bin/python`` (stdlib only). uv installs the same pinned set
(``constraints.txt``) in parallel with bytecode compiled, pip's configuration (``pip config list``: indexes,
find-links, constraint, cert) carried over, its cache in ``$UV_CACHE_DIR`` or ``build/uv-cache``. Any failure on the
uv route falls back to pip (the line before says why). Offline installs (``WHEELS=...``) are pip's alone."""

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Sequence

from . import exits

UV_VERSION = "0.13.9"
# the trace doctor (doctor/, a package of its own) beside the lab, which depends on it by name: installed from here
SPEC = ("-e", "./doctor[full]", "-e", ".[lab,test]")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT / "build" / "uv-cache"
# pip options that carry over to ``uv pip install`` (pip's name -> uv's flag); every other pip setting is pip's own
CARRIED = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}

Runner = Callable[..., subprocess.CompletedProcess]


def parse_pip_config(text: str) -> dict[str, list[str]]:
    """``pip config list`` output (``global.find-links='/opt/wheels'``, ``:env:.extra-index-url='a b'``) as option ->
    values, in order, without repeats. Variables (``:env:``) come first: pip lets them override the files."""
    entries = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and "." in key:
            section, _, option = key.strip().rpartition(".")
            value = value.strip()
            quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""
            entries.append((section != ":env:", option, (value[1:-1] if quoted else value).split()))
    merged: dict[str, list[str]] = {}
    for _, option, values in sorted(
        entries, key=lambda e: e[0]
    ):  # stable: the variables first, each in order
        seen = merged.setdefault(option, [])
        seen.extend(v for v in values if v not in seen)
    return merged


def uv_command(
    uv: str, python: str, config: dict[str, list[str]], constraints: str, spec: Sequence[str]
) -> list[str]:
    """The ``uv pip install`` command line for ``spec`` into ``python``'s environment, pip's settings carried over."""
    cmd = [
        uv,
        "pip",
        "install",
        "--quiet",
        "--python",
        python,
        "--compile-bytecode",
        "--index-strategy",
        "unsafe-best-match",
        "--constraint",
        constraints,
    ]
    for (
        option,
        flag,
    ) in CARRIED.items():  # pip takes one index url (the variable's, when both are set)
        cmd += [
            x
            for v in config.get(option, [])[: 1 if option == "index-url" else None]
            for x in (flag, v)
        ]
    return cmd + list(spec)


def uv_env(config: dict[str, list[str]], environ: dict[str, str] | None = None) -> dict[str, str]:
    """uv's environment: its cache in ``DEFAULT_CACHE`` (or ``$UV_CACHE_DIR``), pip's cert unless ``$SSL_CERT_FILE``."""
    env = dict(os.environ if environ is None else environ)
    env.setdefault("UV_CACHE_DIR", str(DEFAULT_CACHE))
    cert = next((c for c in config.get("cert", []) if Path(c).is_file()), None)
    if cert and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert
    return env


def _tail(proc: subprocess.CompletedProcess) -> str:
    lines = ((proc.stderr or "") + (proc.stdout or "")).strip().splitlines()
    return lines[-1][:200] if lines else f"exit status {proc.returncode}"


def install_with_uv(
    python: str, constraints: str, spec: Sequence[str], run: Runner = subprocess.run
) -> str | None:
    """Install with uv; None when done, else why not (then the caller falls back to pip)."""
    pip = [python, "-m", "pip"]
    got = run([*pip, "install", "--quiet", f"uv=={UV_VERSION}"], capture_output=True, text=True)
    if got.returncode != 0:
        return f"uv {UV_VERSION} could not be installed ({_tail(got)})"
    listed = run([*pip, "config", "list"], capture_output=True, text=True)
    config = parse_pip_config(listed.stdout if listed.returncode == 0 else "")
    uv = str(Path(python).parent / "uv")
    done = run(
        uv_command(uv, python, config, constraints, spec),
        env=uv_env(config),
        text=True,
        stdout=None,
        stderr=subprocess.PIPE,
    )
    return f"uv pip install failed ({_tail(done)})" if done.returncode != 0 else None


def install_with_pip(
    python: str, constraints: str, spec: Sequence[str], run: Runner = subprocess.run
) -> int:
    """pip's route (as before uv): upgrade pip, then the pinned install."""
    run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    return run([python, "-m", "pip", "install", "-q", "-c", constraints, *spec]).returncode


def main(argv: Sequence[str] | None = None, run: Runner = subprocess.run) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m labtools.install", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--python", default=sys.executable, help="the environment's Python (default: this one)"
    )
    ap.add_argument("--constraints", default="constraints.txt")
    ap.add_argument("--pip-only", action="store_true", help="pip's route alone (no uv)")
    a = ap.parse_args(argv)
    if not a.pip_only:
        why = install_with_uv(a.python, a.constraints, SPEC, run=run)
        if why is None:
            return exits.OK
        print(f"install: {why}; installing with pip instead", file=sys.stderr, flush=True)
    return install_with_pip(a.python, a.constraints, SPEC, run=run)


if __name__ == "__main__":
    sys.exit(main())
