"""Results are data: a table that grows as experiments run, results.json (its contract: docs/results.md), figures."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import re
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

from perf_doctor.stats import VERDICTS

from ..project import folder
from .display import frame, readable, wrapped

RESULTS_ENV = "PERF_RESULTS_DIR"
STATUSES = ("ok", "failed")
CHECK_ID = re.compile(r"[a-z][a-z0-9_]{0,59}")


def results_root() -> Path:
    """``$PERF_RESULTS_DIR`` or ``results/`` at the project root (beside notebooks/)."""
    return folder(RESULTS_ENV, "results")


def current_umask() -> int:
    """The process's umask (from /proc where it can, so the umask is never changed, even for an instant)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file and ``os.replace`` (no half file), with a plain ``open``'s permissions (0666 less the
    umask), not the temporary file's 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def describe_error(exc: BaseException) -> str:
    """A one-line, reader-facing description of why an experiment failed."""
    name = type(exc).__name__
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "out of memory" in str(exc).lower() or name == "OutOfMemoryError":
        return f"out of memory: {msg[:300]} (try a smaller batch size)"
    return f"{name}: {msg[:500]}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if hasattr(x, "item"):
        with contextlib.suppress(Exception):
            return _jsonable(x.item())
    return str(x)


class Results:
    """Experiments and checks of one notebook run: ``record(name, config, fn)`` runs ``fn()`` (a metrics dict); a
    failure is printed as one line and kept as a ``failed`` row. Saved atomically after every change."""

    def __init__(
        self,
        notebook: str,
        scale: str,
        env: Mapping[str, Any] | None = None,
        root: Path | str | None = None,
        autosave: bool = True,
    ):
        self.notebook = notebook
        self.scale = scale
        self.env = dict(env or {})
        self.autosave = autosave
        self.experiments: list[dict[str, Any]] = []
        self.comparisons: list[dict[str, Any]] = []
        self.checks: dict[str, bool] = {}
        self.claims: dict[str, str] = {}
        self.notes: dict[str, Any] = {}
        self.dir = Path(root) if root is not None else results_root() / notebook

    def add(
        self,
        name: str,
        config: Mapping[str, Any],
        metrics: Mapping[str, Any] | None = None,
        status: str = "ok",
        error: str | None = None,
    ) -> dict[str, Any]:
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {status!r}")
        row = {
            "name": name,
            "config": _jsonable(dict(config)),
            "metrics": _jsonable(dict(metrics or {})),
            "status": status,
            "error": error,
        }
        self.experiments.append(row)
        self._changed()
        return row

    def record(
        self,
        name: str,
        config: Mapping[str, Any],
        fn: Callable[[], Mapping[str, Any]],
        verbose: bool = True,
        *,
        budget=None,
        limit_s: float | None = None,
    ) -> dict[str, Any]:
        """Run one experiment, the one way a row is run; a failure becomes a ``failed`` row, never a crash. With a
        ``budget`` (``notebook.budget.Budget``) it runs under its guard, ``budget.wrap(fn, limit_s)``: skipped once the
        budget is spent, stopped when it runs past it (or past ``limit_s``)."""
        if budget is not None:
            fn = budget.wrap(fn, limit_s)
        try:
            metrics = fn()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
            err = describe_error(exc)
            if verbose:
                print(wrapped(f"[failed] {name}: {err}"))
            if os.environ.get("PERF_DEBUG"):
                traceback.print_exc()
            # a refused setting allocated nothing: no collection (seconds with many compiled graphs)
            if not isinstance(exc, ValueError):
                gc.collect()
                with contextlib.suppress(Exception):
                    import torch

                    if torch.cuda.is_available():
                        torch.cuda.empty_cache()
            return self.add(name, config, {}, status="failed", error=err)
        row = self.add(name, config, metrics or {}, status="ok")
        if verbose:
            mean = row["metrics"].get("step_ms_mean")  # the statistic the verdicts use
            extra = f" (mean step {mean:.2f} ms)" if isinstance(mean, (int, float)) else ""
            print(wrapped(f"[ok] {name}{extra}"))
        return row

    def get(self, name: str) -> dict[str, Any] | None:
        """The latest row with this name."""
        return next((row for row in reversed(self.experiments) if row["name"] == name), None)

    def metric(self, name: str, key: str, default: Any = None) -> Any:
        row = self.get(name)
        return default if row is None or row["status"] != "ok" else row["metrics"].get(key, default)

    def check(self, check_id: str, value: bool, claim: str | None = None) -> bool:
        """Record a claim computed from this run under a stable id: ``checks`` maps ids to booleans, ``claims`` ids to
        their sentences; tests refer to ids."""
        if not isinstance(check_id, str) or not CHECK_ID.fullmatch(check_id):
            raise ValueError(f"a check id is lower_snake_case, at most 60 characters: {check_id!r}")
        self.checks[check_id] = bool(value)
        self.claims[check_id] = claim or check_id.replace("_", " ")
        self._changed()
        return bool(value)

    def compare_times(
        self, a: str, b: str, a_ms, b_ms, *, metric: str = "step_ms_mean", **kw
    ) -> dict[str, Any]:
        """Compare two variants' timings (``measure.compare.compare_times``; ``role="timer"`` for a second reading of
        the same work) and keep the entry in ``comparisons`` (replacing one for the same a, b, metric)."""
        from ..measure.compare import compare_times

        entry = compare_times(a_ms, b_ms, a=a, b=b, metric=metric, **kw)
        self.comparisons = [
            c for c in self.comparisons if (c["a"], c["b"], c["metric"]) != (a, b, metric)
        ] + [entry]
        self._changed()
        return entry

    def comparison(self, a: str, b: str, metric: str | None = None) -> dict[str, Any] | None:
        """The comparison of ``b`` against ``a`` (the latest; None when there is none)."""
        found = [
            c
            for c in self.comparisons
            if c["a"] == a and c["b"] == b and metric in (None, c["metric"])
        ]
        return found[-1] if found else None

    def note(self, key: str, value: Any) -> None:
        """Store an extra measured figure (for example a break-even step count)."""
        self.notes[key] = _jsonable(value)
        self._changed()

    def to_dict(self) -> dict[str, Any]:
        return {
            "notebook": self.notebook,
            "scale": self.scale,
            "env": _jsonable(self.env),
            "experiments": self.experiments,
            "checks": self.checks,
            "claims": self.claims,
            "comparisons": _jsonable(self.comparisons),
            "notes": self.notes,
        }

    def _changed(self) -> None:
        if self.autosave:
            self.save()

    def save(self) -> Path:
        path = self.dir / "results.json"
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")
        return path

    def table(self, metrics: list[str] | None = None):
        """The experiments as a DataFrame: name, config columns, metrics, status, error."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "experiment": e["name"],
                    **e["config"],
                    **{k: v for k, v in e["metrics"].items() if metrics is None or k in metrics},
                    "status": e["status"],
                    "error": e["error"] or "",
                }
                for e in self.experiments
            ]
        )

    def readable(self, metrics: list[str] | None = None):
        """``table(metrics)`` made for a person to read (see ``display.readable``)."""
        return readable(self.table(metrics))

    def checks_table(self):
        """The checks as a DataFrame (``id``, ``claim``, ``holds``), each claim shown whole, wrapped in its cell."""
        import pandas as pd

        rows = [
            {"id": k, "claim": self.claims.get(k, k), "holds": v} for k, v in self.checks.items()
        ]
        return frame(pd.DataFrame(rows, columns=["id", "claim", "holds"]))

    def comparisons_table(self):
        """The comparisons in the one convention of tables and prose: ``b`` takes ``b / a``× ``a``'s figure (its
        time, or its memory for a memory metric), the 95% interval, the noise floor and the verdict."""
        import pandas as pd

        from ..measure.compare import takes

        cols = ["b", "a", "metric", "time_ratio", "interval", "floor", "verdict"]
        rows = [c | takes(c) for c in self.comparisons]
        return frame(pd.DataFrame(rows, columns=cols).rename(columns={"time_ratio": "b / a"}))

    def savefig(self, fig, name: str) -> Path:
        path = self.dir / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        return path


def load(notebook: str, root: Path | str | None = None) -> dict[str, Any]:
    """Read a notebook's results.json, with a clear message when it does not exist."""
    path = (Path(root) if root is not None else results_root()) / notebook / "results.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} does not exist: run the notebook {notebook}.ipynb first (make run)."
        )
    return json.loads(path.read_text())


def _lacks(what: str, d: Mapping[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [f"{what} lacks {k!r}" for k in keys if k not in d]


def validate(doc: Mapping[str, Any]) -> list[str]:
    """Problems with a results document against the contract (empty when it conforms)."""
    problems = _lacks("the document", doc, ("notebook", "scale", "env", "experiments", "checks"))
    if problems:
        return problems
    problems += _lacks("env", doc["env"], ("python", "torch", "device", "cpu_count"))
    if doc["scale"] not in ("smoke", "full"):
        problems.append(f"scale {doc['scale']!r} is not smoke or full")
    if not doc["experiments"]:
        problems.append("no experiments")
    for i, e in enumerate(doc["experiments"]):
        problems += _lacks(f"experiment {i}", e, ("name", "config", "metrics", "status", "error"))
        if e.get("status") not in STATUSES:
            problems.append(f"experiment {i} has status {e.get('status')!r}")
        if e.get("status") == "failed" and not e.get("error"):
            problems.append(f"experiment {i} failed without an error message")
    for k, v in doc["checks"].items():
        if not isinstance(v, bool):
            problems.append(f"check {k!r} is not a boolean")
        if not CHECK_ID.fullmatch(k):
            problems.append(f"check {k!r} is not an id (lower_snake_case)")
    for i, c in enumerate(doc.get("comparisons", [])):
        missing = _lacks(
            f"comparison {i}", c, ("a", "b", "metric", "ratio", "low", "high", "verdict")
        )
        if missing:
            problems += missing
        elif c["verdict"] not in VERDICTS:
            problems.append(f"comparison {i} has verdict {c['verdict']!r}")
        elif not (c["low"] <= c["ratio"] <= c["high"]):
            problems.append(
                f"comparison {i}: the ratio {c['ratio']} is outside its interval [{c['low']}, {c['high']}]"
            )
        kept = c.get("samples")
        if not (
            isinstance(kept, Mapping)
            and isinstance(kept.get("a"), list)
            and isinstance(kept.get("b"), list)
        ):
            problems.append(f"comparison {i} keeps no samples ({{'a': [...], 'b': [...]}})")
        elif (len(kept["a"]), len(kept["b"])) != (c.get("n_a"), c.get("n_b")):
            problems.append(
                f"comparison {i}: {len(kept['a'])} and {len(kept['b'])} samples kept, n_a/n_b say "
                f"{c.get('n_a')} and {c.get('n_b')}"
            )
        if not isinstance(c.get("floor"), (int, float)) or not isinstance(c.get("floor_from"), str):
            problems.append(f"comparison {i} lacks its noise floor (floor, floor_from)")
    claims = doc.get("claims", {})
    return problems + [
        f"check {k!r} has no claim (its sentence in 'claims')"
        for k in doc["checks"]
        if not isinstance(claims.get(k), str) or not claims[k]
    ]
