"""A lesson's claims as data beside the lesson (``helpers/lessons/<lesson>/checks.py``), judged over a run's
results.json in one closing cell (``evaluate``) and by a test over the GPU reference's; a claim whose figure the run
did not record is false and says which (docs/results.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from perf_doctor.stats import direction

from .display import frame
from .results import CHECK_ID


class NotMeasured(LookupError):
    """A figure a claim's rule reads is not in the results (its row is missing or failed, or a note is absent)."""


class Facts:
    """One results document, read by claims' rules: every accessor raises ``NotMeasured`` for a missing figure."""

    def __init__(self, doc: Mapping[str, Any]):
        self.doc = doc
        self.scale = doc.get("scale")
        self.env = doc.get("env", {})
        self.gpu = str(self.env.get("device", "")).startswith("cuda")

    def row(self, name: str) -> Mapping[str, Any]:
        """The latest row of this name that ran (``NotMeasured`` when it is missing or failed)."""
        rows = [r for r in self.doc.get("experiments", []) if r.get("name") == name]
        if not rows:
            raise NotMeasured(f"no row {name!r}")
        if rows[-1].get("status") != "ok":
            raise NotMeasured(f"the row {name!r} failed: {rows[-1].get('error')}")
        return rows[-1]

    def has(self, name: str) -> bool:
        try:
            self.row(name)
        except NotMeasured:
            return False
        return True

    def metric(self, name: str, key: str) -> Any:
        value = self.row(name).get("metrics", {}).get(key)
        if value is None:
            raise NotMeasured(f"the row {name!r} has no {key!r}")
        return value

    def note(self, key: str) -> Any:
        value = self.doc.get("notes", {}).get(key)
        if value is None:
            raise NotMeasured(f"no note {key!r}")
        return value

    def comparison(self, a: str, b: str, metric: str = "step_ms_mean") -> Mapping[str, Any]:
        found = [
            c
            for c in self.doc.get("comparisons", [])
            if c.get("a") == a and c.get("b") == b and c.get("metric") == metric
        ]
        if not found:
            raise NotMeasured(f"no comparison of {b!r} against {a!r} ({metric})")
        return found[-1]

    def direction(self, a: str, b: str, metric: str = "step_ms_mean") -> str | None:
        """``"faster"`` / ``"slower"`` when ``b`` against ``a`` is resolved, else None (no difference)."""
        return direction(self.comparison(a, b, metric))


def always(facts: Facts) -> bool:
    return True


def on_gpu(facts: Facts) -> bool:
    return facts.gpu


@dataclass(frozen=True)
class Claim:
    """``id``: stable, lower_snake_case (tests refer to it); ``sentence``: what the claim says; ``rule``: whether it
    holds in a run's facts; ``applies``: whether the run could measure it at all (``on_gpu`` for a GPU's figure)."""

    id: str
    sentence: str
    rule: Callable[[Facts], Any]
    applies: Callable[[Facts], bool] = always

    def __post_init__(self):
        if not CHECK_ID.fullmatch(self.id):
            raise ValueError(
                f"a claim's id is lower_snake_case, at most 60 characters: {self.id!r}"
            )


def judge(doc: Mapping[str, Any], claims: list[Claim]) -> list[dict[str, Any]]:
    """Each claim on one results document: ``{id, claim, holds, why}``; ``holds`` is None where the claim does not
    apply to this run (a GPU's figure on a CPU), False with ``why`` where a figure it reads was not measured."""
    facts = Facts(doc)
    rows = []
    for c in claims:
        holds, why = None, "does not apply to this run"
        if c.applies(facts):
            try:
                holds, why = bool(c.rule(facts)), ""
            except NotMeasured as exc:
                holds, why = False, f"not measured: {exc}"
        rows.append({"id": c.id, "claim": c.sentence, "holds": holds, "why": why})
    return rows


def evaluate(results, claims: list[Claim]):
    """The closing cell's call: judge the claims on this run's results, record each that applies
    (``results.check``, so results.json keeps them) and return them as a table."""
    import pandas as pd

    rows = judge(results.to_dict(), claims)
    for r in rows:
        if r["holds"] is not None:
            results.check(r["id"], r["holds"], r["claim"])
    shown = pd.DataFrame(rows, columns=["id", "claim", "holds", "why"])
    if not shown["why"].astype(bool).any():
        shown = shown.drop(columns="why")
    return frame(shown)
