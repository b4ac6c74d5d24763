"""The doctor's published accuracy (issue 44, item 5): ``benchmarks/doctor_accuracy.py`` regenerated on a subset of
its corpus (a few planted steps, the H100 reference's traces, TraceLens' where ``../shared`` has them): the block in
``docs/doctor.md`` is the script's output format, its confusion matrix adds up, a mislabelled entry lands off the
diagonal, and the reading against a base finds a plant. Timings are never asserted."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest

from benchmarks import doctor_accuracy as acc
from tests.shared_data import shared_path

SUBSET = {
    "none",
    "input 15%",
    "compute 50%",
    "launch/overhead 15%",
    "mixed input 45% + compute 20%",
}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    entries, cal = acc.run(rounds=2, which=SUBSET, folder=tmp_path_factory.mktemp("accuracy"))
    return entries, acc.render(entries, 2, cal, 2)


def cell(text: str) -> int:
    return 0 if text == "·" else int(text.strip("*"))


def test_the_docs_block_is_the_scripts_format(regenerated):
    entries, block = regenerated
    docs = acc.docs_block()
    assert docs is not None, (
        "docs/doctor.md has no doctor-accuracy block: run benchmarks/doctor_accuracy.py"
    )
    ours, theirs = acc.tables(block), acc.tables(docs)
    assert [t[0] for t in theirs] == [t[0] for t in ours]  # the same tables, the same columns
    assert [t[0] for t in ours] == [
        ["label \\ named", *acc.NAMED, "right"],
        acc.SAVINGS_HEAD,
        acc.CORPUS_HEAD,
    ]
    stamp = r"Written by `python benchmarks/doctor_accuracy.py --rounds \d+ --repeats \d+` on "
    stamp += r"\d{4}-\d\d-\d\d \d\d:\d\d UTC, "
    stamp += r".+, \d+ cores, .+, commit ([0-9a-f]{7,}|unknown)"
    for text in (block, docs):
        assert re.search(stamp, text), text[:400]
        caption = [line for line in text.splitlines() if line.startswith("**")]
        assert [c.split("**")[1] for c in caption] == ["Confusion matrix", "Savings", "Corpus"], (
            caption
        )
    assert {r[0] for r in ours[0][1:]} <= set(acc.LABELS)
    names = [r[0] for r in ours[2][1:]]
    assert {"base (nothing planted)", *SUBSET, "05 none", "05 input", "05 compute"} <= set(names), (
        names
    )


@pytest.mark.parametrize("which", ["docs", "regenerated"])
def test_the_matrix_adds_up(regenerated, which):
    """Every scored entry is counted once; ``right`` is the bold cells; the caption and the corpus' marks agree."""
    block = acc.docs_block() if which == "docs" else regenerated[1]
    matrix, _, corpus = acc.tables(block)
    head = matrix[0]
    total = right = 0
    for row in matrix[1:]:
        counts = [cell(c) for c in row[1:-1]]
        bold = [cell(c) for c in row[1:-1] if c.startswith("**")]
        ok = [
            n for c, n in zip(head[1:-1], counts) if acc.correct(row[0], c)
        ]  # the cells on the diagonal
        assert bold == [n for n in ok if n], row
        assert row[-1] == f"{sum(ok)}/{sum(counts)}", row
        total, right = total + sum(counts), right + sum(ok)
    assert f"{right} of {total} right" in block
    again = [r[6] for r in corpus[1:] if r[1] == "planted" and r[4] != "base"]
    assert again and all(a != "·" for a in again), again  # the planted corpus was profiled again
    marks = [r[5][-1] for r in corpus[1:] if r[4] != "base"]
    assert len(marks) == total and marks.count("✓") == right, marks


def test_a_mislabelled_entry_shows_off_the_diagonal(regenerated):
    entries, _ = regenerated
    good = next(e for e in entries if e.name == "05 input")
    assert good.named == "input" and acc.correct(good.label, good.named)
    m = acc.confusion(entries)
    wrong = [dataclasses.replace(e, label="compute") if e is good else e for e in entries]
    w = acc.confusion(wrong)
    assert w["compute"]["input"] == m["compute"]["input"] + 1
    assert w["input"]["input"] == m["input"]["input"] - 1
    assert acc.on_diagonal(w) == acc.on_diagonal(m) - 1
    row = next(r for r in acc.tables("\n".join(acc.matrix_table(w)))[0] if r[0] == "compute")
    assert row[1 + acc.NAMED.index("input")] == str(w["compute"]["input"])  # counted, not bold


def test_the_reference_plants_are_named_and_their_savings_read(regenerated):
    entries, _ = regenerated
    by = {e.name: e for e in entries}
    for name, cause in {
        "05 input": "input",
        "05 compute": "compute",
        "05 host sync": "compute",
    }.items():
        assert by[name].named == cause, (name, by[name].named)
    rows = {(r["entry"], r["plant"]): r for r in acc.saving_rows(entries)}
    sync = rows[("05 host sync", "host sync")]
    assert 0 < sync["reading"] < 1 and 0 < sync["measured"] < 1 and sync["hw"] is None
    assert sync["again"] == []  # a reference trace is read once
    planted = [r for r in rows.values() if r["hw"] is not None]
    assert {r["entry"] for r in planted} == SUBSET - {
        "none"
    }  # every plant made here has its saving
    mixed = {r["plant"] for r in planted if r["entry"].startswith("mixed")}
    assert mixed == {"input", "compute"}


def test_tracelens_entries_are_labelled_from_their_timeline():
    shared_path("traces", "tracelens")
    labels = {e.name: e.label for e in acc.tracelens_entries()}
    assert len(labels) >= 6, labels
    assert labels["h100/gaunernst_bert-small-uncased__1016001"] == acc.IDLE
    assert labels["inference/vllm_decode_full/graph_execution"] == "compute"


def fake(step_ms: float, **ms) -> SimpleNamespace:
    causes = [{"cause": c.replace("_", "/"), "ms": v} for c, v in ms.items()]
    causes.sort(key=lambda c: -c["ms"])
    return SimpleNamespace(
        step_ms=step_ms,
        causes=causes,
        nothing=False,
        damaged=False,
        top=causes[0]["cause"],
        step_times=[step_ms, step_ms],
        per_step={c["cause"]: [c["ms"], c["ms"]] for c in causes},
        ms=lambda c: next((x["ms"] for x in causes if x["cause"] == c), None),
    )


def test_a_plant_is_read_against_its_base():
    base = fake(10.0, compute=6.0, launch_overhead=4.0, input=0.0)
    # a compute plant of half the step: the base's work is the other half, the product the rest of compute
    planted = fake(20.0, compute=16.0, launch_overhead=4.0, input=0.0)
    p = acc.plant_shares(planted, base)
    assert p["compute"] == pytest.approx(0.5) and p["launch/overhead"] == pytest.approx(0.0)
    assert acc.named_cause(planted, base) == "compute"
    # its top cause alone is compute too, but a 15% input plant is not the top cause: read against the base it is
    weak = fake(10.0 / 0.85, compute=6.0, launch_overhead=4.0, input=10.0 / 0.85 * 0.15)
    assert weak.top == "compute" and acc.named_cause(weak, base) == "input"
    # the base profiled again, its split a little different: nothing planted (a step stretched by load would read
    # as a plant: hence the base profiled just before each entry, and medians over 20 steps)
    assert (
        acc.named_cause(fake(10.2, compute=6.1, launch_overhead=4.1, input=0.0), base) == acc.NONE
    )
    assert acc.named_cause(base) == "compute"


def test_the_matrix_counts_labels_against_named_causes():
    e = lambda label, named: acc.Entry(label + named, "t", label, "", named=named)  # noqa: E731
    entries = [
        e("input", "input"),
        e("compute", "input"),
        e(acc.IDLE, "host sync"),
        e("none", "none"),
    ]
    m = acc.confusion(entries)
    assert list(m) == ["input", "compute", acc.IDLE, "none"]  # LABELS order, empty rows left out
    assert m["compute"]["input"] == 1 and acc.on_diagonal(m) == 3
    assert acc.correct(acc.IDLE, "launch/overhead") and not acc.correct(acc.IDLE, "compute")
