"""Set-up steps of ``make setup`` that are not pip installs (not used by the notebooks).

``browser``: find the Chromium the real-browser test drives, or fetch Playwright's (never system packages).
``lab-settings``: JupyterLab defaults for this project's lab (no news pop-up, no update check).
Usage: ``python -m labtools.devsetup [browser] [lab-settings]`` (both when none is named)."""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import exits

CHROMIUM_ENV = "PERF_CHROMIUM"
REQUIRE_ENV = "PERF_REQUIRE_BROWSER"
SYSTEM_CHROMIUMS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
INSTALL_TIMEOUT_S = 300
ENABLE_HINT = (
    "to enable it: `.venv/bin/python -m playwright install chromium` (needs internet), "
    "or `sudo apt-get install chromium` (Debian/Ubuntu), or set $PERF_CHROMIUM to a Chromium executable"
)

# JupyterLab settings for the project's lab: never ask about news, never fetch them, no update check.
LAB_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}
}
LAB_OVERRIDES_NAME = "pytorch-performance-lab.json"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def browser_required(environ: Mapping[str, str] | None = None) -> bool:
    """Must the browser test run (fail without a browser)? Under ``CI`` or ``PERF_REQUIRE_BROWSER=1``."""
    environ = os.environ if environ is None else environ
    return _truthy(environ.get("CI")) or _truthy(environ.get(REQUIRE_ENV))


def playwright_chromium() -> Path | None:
    """Playwright's own Chromium when it has been downloaded (``playwright install chromium``), else None."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            path = Path(pw.chromium.executable_path)
    except Exception:  # noqa: BLE001 - not installed, or a broken driver: no browser
        return None
    return path if path.exists() else None


@dataclass
class Chromium:
    path: Path | None  # None: Playwright's own browser (Playwright picks its executable)
    source: str  # "PERF_CHROMIUM", "system" or "playwright"
    shown: str  # the path, for messages


def find_chromium(
    environ: Mapping[str, str] | None = None,
    system: tuple[str, ...] = SYSTEM_CHROMIUMS,
    playwright=playwright_chromium,
) -> Chromium | None:
    """``$PERF_CHROMIUM`` when set (missing: None, no fallback), else a system Chromium, else Playwright's; or None."""
    environ = os.environ if environ is None else environ
    explicit = environ.get(CHROMIUM_ENV, "").strip()
    if explicit:
        p = Path(explicit)
        return Chromium(p, CHROMIUM_ENV, str(p)) if p.is_file() and os.access(p, os.X_OK) else None
    for s in system:
        if Path(s).is_file() and os.access(s, os.X_OK):
            return Chromium(Path(s), "system", s)
    own = playwright()
    return Chromium(None, "playwright", str(own)) if own is not None else None


@dataclass
class Decision:
    action: str  # "run", "skip" or "fail"
    reason: str
    chromium: Chromium | None = None


def browser_decision(
    environ: Mapping[str, str] | None = None,
    *,
    playwright_importable: bool | None = None,
    find=find_chromium,
) -> Decision:
    """Run the browser test, skip it (a plain machine) or fail it (CI, ``PERF_REQUIRE_BROWSER=1``)."""
    environ = os.environ if environ is None else environ
    if playwright_importable is None:
        try:
            import playwright.sync_api  # noqa: F401

            playwright_importable = True
        except ImportError:
            playwright_importable = False
    required = browser_required(environ)
    if not playwright_importable:
        why = "Playwright for Python is not installed (`make setup` installs the test extras)"
        return Decision("fail" if required else "skip", f"browser test: {why}")
    found = find(environ)
    if found is not None:
        return Decision("run", f"browser test uses {found.shown} ({found.source})", found)
    explicit = environ.get(CHROMIUM_ENV, "").strip()
    why = (
        f"${CHROMIUM_ENV}={explicit} is not an executable file"
        if explicit
        else f"no Chromium ({', '.join(SYSTEM_CHROMIUMS)} or Playwright's own)"
    )
    if required:
        gate = "CI" if _truthy(environ.get("CI")) else REQUIRE_ENV
        return Decision("fail", f"browser test: {why}, and {gate} requires it; {ENABLE_HINT}")
    return Decision("skip", f"browser test skipped: {why}; {ENABLE_HINT}")


def ensure_browser(
    environ: Mapping[str, str] | None = None,
    timeout_s: float = INSTALL_TIMEOUT_S,
    run=subprocess.run,
) -> Decision:
    """``make setup``'s browser step: use a Chromium that is there, else try Playwright's download
    (bounded by ``timeout_s``). Never fails: says in one line what the browser test will do."""
    environ = os.environ if environ is None else environ
    decision = browser_decision(environ)
    if decision.action == "run" or environ.get(CHROMIUM_ENV, "").strip():
        return decision  # found one, or the user named one: do not download behind their back
    try:
        import playwright  # noqa: F401
    except ImportError:
        return decision
    print(
        "No Chromium found; trying Playwright's own download (`playwright install chromium`) ...",
        flush=True,
    )
    try:
        proc = run(
            [sys.executable, "-m", "playwright", "install", "chromium"],
            timeout=timeout_s,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        tail = (proc.stdout or "").strip().splitlines()
        ok = proc.returncode == 0
        detail = (
            ""
            if ok
            else (next((ln for ln in tail if "Error" in ln), tail[-1] if tail else "") or "")
        )
    except subprocess.TimeoutExpired:
        ok, detail = False, f"no answer within {timeout_s:.0f} s"
    if not ok:
        print(f"Playwright's browser download failed ({detail.strip()[:160]}).", flush=True)
    return browser_decision(environ)


def lab_settings_dir(prefix: str | Path | None = None) -> Path:
    """Where JupyterLab reads namespaced setting overrides for the environment at ``prefix``."""
    return Path(prefix or sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.d"


def install_lab_settings(prefix: str | Path | None = None) -> Path:
    """Write the project's JupyterLab defaults into the environment; returns the file written."""
    target = lab_settings_dir(prefix) / LAB_OVERRIDES_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(LAB_OVERRIDES, indent=2) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    steps = list(argv if argv is not None else sys.argv[1:]) or ["browser", "lab-settings"]
    if unknown := [s for s in steps if s not in ("browser", "lab-settings")]:
        print(f"unknown step(s) {unknown}; use browser and/or lab-settings", file=sys.stderr)
        return exits.BAD_INPUT
    if "lab-settings" in steps:
        print(f"JupyterLab defaults (no news pop-up, no update check): {install_lab_settings()}")
    if "browser" in steps:
        d = ensure_browser()
        print(
            d.reason
            if d.action != "fail"
            else d.reason.replace("browser test:", "browser test will FAIL:")
        )
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
