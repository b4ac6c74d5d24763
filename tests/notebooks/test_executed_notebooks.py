"""The executed notebooks: clean output (no library log noise) and prose that lives in markdown cells.

Reads the executed copies that ``make test`` keeps (nbmake ``--overwrite`` on copies under
``build/test/notebooks``; the Makefile points ``$PERF_EXECUTED_NOTEBOOKS`` there), or a ``make run``
results folder (``PERF_EXECUTED_NOTEBOOKS=results``: ``<stem>/<stem>.ipynb``). Without
``$PERF_EXECUTED_NOTEBOOKS`` (a plain ``pytest tests``) there is nothing to read and the tests
skip; when it is set, a missing or unexecuted copy fails.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from helpers.notebook import env

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED_ENV = "PERF_EXECUTED_NOTEBOOKS"
MAX_GENERATED_SHARE = 0.25

# Kineto's log format: "<SEVERITY>:<date> <time> <pid>:<tid> <file>.cpp:<line>] <message>"
KINETO_LINE = re.compile(r"^(VERBOSE|INFO|WARNING|STAGE|ERROR|USDT):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+:\d+\]", re.M)
NOISE = {
    "Kineto's failed GPU probe": re.compile(r"gpuGetDeviceCount failed"),
    "Kineto's USDT probe markers": re.compile(r"USDT\b.*profiler_(start|stop)"),
    "a Kineto log line": KINETO_LINE,
    "the kernel's unencrypted-TCP warning": re.compile(r"running over TCP without encryption"),
    "the C++ extension loader's CUDA_HOME warning": re.compile(r"No CUDA runtime is found"),
    # a Python warning printed by the warnings module ("file.py:12: UserWarning: ..."): a library's stray
    # warning; a notebook that teaches one shows it deliberately (caught and explained), not raw
    "a stray Python warning": re.compile(r"^\S+\.py:\d+: \w*Warning: ", re.M),
}
# With a GPU, Kineto's errors are kept on purpose (env.kineto_log_level) and its USDT markers rank above them.
GPU_ALLOWED = {"Kineto's USDT probe markers", "a Kineto log line"}


def _executed_path(stem: str) -> Path:
    raw = os.environ.get(EXECUTED_ENV, "").strip()
    if not raw:
        pytest.skip(f"no executed notebooks to read: `make test` sets ${EXECUTED_ENV} (or set it to a "
                    "`make run` results folder)")
    base = Path(raw)
    for p in (base / f"{stem}.ipynb", base / stem / f"{stem}.ipynb"):
        if p.exists():
            return p
    pytest.fail(f"no executed copy of {stem} in {base} (${EXECUTED_ENV}): nbmake/`make run` did not write it",
                pytrace=False)


def _executed(stem: str) -> dict:
    path = _executed_path(stem)
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if not any(c.get("execution_count") is not None for c in code):
        pytest.fail(f"{path} was not executed (no execution counts)", pytrace=False)
    return nb


def _text(o: dict) -> str:
    if o.get("output_type") == "stream":
        return "".join(o.get("text", ""))
    if o.get("output_type") == "error":
        return "\n".join(o.get("traceback", []))
    data = o.get("data", {})
    return "\n".join("".join(data[k]) for k in ("text/plain", "text/markdown", "text/html") if k in data)


def noise(nb: dict, allowed: set[str] = frozenset()) -> list[str]:
    """One line per noisy output: ``cell <i>: <what>: <the line>``."""
    found = []
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            text = _text(o)
            hits = {}
            for what, pat in NOISE.items():
                m = pat.search(text) if what not in allowed else None
                if m:
                    hits[what] = text[text.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
            if len(hits) > 1:
                hits.pop("a Kineto log line", None)  # said more precisely by another entry
            found += [f"cell {i}: {what}: {line[:160]}" for what, line in hits.items()]
    return found


def prose_share(nb: dict) -> tuple[float, int, int]:
    """Generated markdown (code cells' text/markdown outputs) over markdown cells' sources, in characters."""
    md = sum(len("".join(c["source"])) for c in nb["cells"] if c["cell_type"] == "markdown")
    gen = sum(len("".join(o["data"]["text/markdown"])) for c in nb["cells"] if c["cell_type"] == "code"
              for o in c.get("outputs", []) if "text/markdown" in o.get("data", {}))
    return (gen / md if md else float("inf")), gen, md


def test_every_notebook_is_checked():
    assert SOURCES, "no notebooks/[0-9][0-9]_*.ipynb found"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_executed_notebook_has_no_library_noise(src):
    nb = _executed(src.stem)
    allowed = GPU_ALLOWED if env.cuda_available() else set()
    found = noise(nb, allowed)
    assert not found, f"{src.stem}: library noise in the executed notebook:\n" + "\n".join(found[:20])


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_generated_prose_is_at_most_a_quarter_of_the_markdown(src):
    share, gen, md = prose_share(_executed(src.stem))
    assert share <= MAX_GENERATED_SHARE, (
        f"{src.stem}: generated markdown is {gen} characters, {share:.0%} of the markdown cells' {md} "
        f"(at most {MAX_GENERATED_SHARE:.0%}): move explanations into markdown cells, keep computed sentences short")


# --- the checks themselves, on synthetic notebooks ---------------------------------------------------------

# "nan" as a word in what a reader sees: a number that was never measured, printed as one (issue 31). Matches "nan",
# "NaN", "nan ms", "+nan%"; not "nanoseconds" or a name holding the letters.
NAN_WORD = re.compile(r"(?<![A-Za-z_])nan(?![A-Za-z_])", re.I)


def nan_lines(nb: dict) -> list[str]:
    """One line per output line that shows NaN: ``cell <i>: <the line>``."""
    found = []
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            if o.get("output_type") == "error":
                continue
            for line in _text(o).splitlines():
                if NAN_WORD.search(line):
                    found.append(f"cell {i}: {line.strip()[:160]}")
    return found


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_no_nan_reaches_the_reader(src):
    found = nan_lines(_executed(src.stem))
    assert not found, f"{src.stem}: NaN shown to the reader (say what was not measured instead):\n" + "\n".join(found[:15])


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_the_h100_reference_is_shown(src):
    """Every executed notebook shows the H100 reference run (data/reference/h100) beside its own numbers."""
    nb = _executed(src.stem)
    text = "\n".join(_text(o) for c in nb["cells"] for o in c.get("outputs", []))
    assert "Reference run beside yours: h100" in text, f"{src.stem}: the reference note is not in the outputs"
    assert "reference (h100)" in text or "H100 reference" in text, \
        f"{src.stem}: no H100 figure shown beside this run's (a 'reference (h100)' column or an article table)"


def test_nan_is_found_as_a_word_only():
    nb = _nb({"output_type": "stream", "name": "stdout", "text": "T_batch nan -> nan ms\nnanoseconds ok\nbest: NaN\n"})
    assert [x.split(": ", 1)[1] for x in nan_lines(nb)] == ["T_batch nan -> nan ms", "best: NaN"]


def _nb(*outputs, markdown="x" * 100):
    return {"cells": [{"cell_type": "markdown", "source": [markdown]},
                      {"cell_type": "code", "execution_count": 1, "source": [], "outputs": list(outputs)}]}


def _stderr(text):
    return {"output_type": "stream", "name": "stderr", "text": [text]}


@pytest.mark.parametrize("line,what", [
    ("ERROR:2026-11-22 04:12:13 10489:10489 DeviceProperties.cpp:56] gpuGetDeviceCount failed with code 35\n",
     "Kineto's failed GPU probe"),
    ("USDT:2026-11-22 04:12:13 10489:10489 SyncActivityProfilerHandler.cpp:39] profiler_start\n",
     "Kineto's USDT probe markers"),
    ("WARNING:2026-11-22 04:12:13 1:2 CuptiActivityApi.cpp:99] something\n", "a Kineto log line"),
    ("[IPKernelApp] WARNING | Kernel is running over TCP without encryption. All communication ...\n",
     "the kernel's unencrypted-TCP warning"),
    ("/x/site-packages/torch/utils/data/dataloader.py:626: UserWarning: This DataLoader will create 4 worker\n",
     "a stray Python warning"),
])
def test_noise_is_found(line, what):
    found = noise(_nb(_stderr("ok\n" + line)))
    assert any(what in f for f in found), found
    assert all(f.startswith("cell 1: ") for f in found)


def test_clean_and_allowed_output_passes():
    assert noise(_nb(_stderr("step 3: 12.5 ms\n"), {"output_type": "stream", "name": "stdout",
                                                     "text": ["a UserWarning is explained below\n"]})) == []
    usdt = _stderr("USDT:2026-11-22 04:12:13 1:1 SyncActivityProfilerHandler.cpp:46] profiler_stop\n")
    assert noise(_nb(usdt), GPU_ALLOWED) == []


def test_prose_share_as_the_brief_defines_it():
    md_out = {"output_type": "display_data", "data": {"text/markdown": ["y" * 25]}, "metadata": {}}
    assert prose_share(_nb(md_out)) == (0.25, 25, 100)
    share, gen, md = prose_share(_nb(md_out, md_out))
    assert (gen, md) == (50, 100) and share > MAX_GENERATED_SHARE


def test_missing_executed_copy_fails_not_skips(tmp_path, monkeypatch):
    monkeypatch.setenv(EXECUTED_ENV, str(tmp_path))
    with pytest.raises(pytest.fail.Exception, match="no executed copy"):
        _executed("01_profiler_basics")
    (tmp_path / "01_profiler_basics.ipynb").write_text(json.dumps(
        {"cells": [{"cell_type": "code", "execution_count": None, "source": [], "outputs": []}]}))
    with pytest.raises(pytest.fail.Exception, match="was not executed"):
        _executed("01_profiler_basics")


def test_make_test_keeps_executed_copies_and_points_the_test_at_them():
    mk = (ROOT / "Makefile").read_text()
    assert f"{EXECUTED_ENV}=$(TEST_NOTEBOOKS)" in mk
    assert "NBMAKE           := env -u MPLBACKEND $(BIN)/python -m pytest --nbmake --nbmake-timeout=900 --overwrite" in mk
    assert "$(NBMAKE) $(ALONE_RUN:%=$(TEST_NOTEBOOKS)/%.ipynb)" in mk and "$(NBMAKE) $(BESIDE_RUN:%=$(TEST_NOTEBOOKS)/%.ipynb)" in mk


# --- what a reader sees (issue 33): promised figures, readable chart text, no all-zero column --------------------
# A markdown cell that promises a picture ("the chart", "a timeline", "the loss curves", "drawn as") right before a
# code cell: that cell must show one. ("figure" is left out: the notebooks also say "figures" for numbers.)
PROMISE = re.compile(r"\b(drawn|plotted|(charts?|plots?|timelines?|curves)\b[^.]{0,30}\b(below|here)|"
                     r"(below|then|next)\b[^.]{0,40}\b(charts?|plots?|timelines?|curves))\b", re.I)
OUTPUT_AREA_PX = 964     # JupyterLab's output area at 1400x900 with the file browser open (the browser test's view)
MIN_FONT_PT = 7          # the smallest text the lessons' charts use (fontsize=7: tick labels, legends)
MIN_TEXT_PX = 8.5        # chart text at least ~9 px tall where it is shown


def missing_figures(nb: dict) -> list[str]:
    cells, found = nb["cells"], []
    for i, c in enumerate(cells):
        prev = cells[i - 1] if i else None
        if c["cell_type"] != "code" or not prev or prev["cell_type"] != "markdown":
            continue
        m = PROMISE.search("".join(prev["source"]))
        if m and not any("image/png" in o.get("data", {}) or "image/svg+xml" in o.get("data", {})
                         for o in c.get("outputs", [])):
            found.append(f"cell {i}: the markdown above promises {m.group(0)!r}; the cell shows no picture")
    return found


def small_chart_text(nb: dict) -> list[str]:
    """PNG outputs whose ``MIN_FONT_PT`` text is under ``MIN_TEXT_PX`` px where shown: px per pt from the PNG's dpi
    (matplotlib writes it), shrunk to the output area when the picture is wider."""
    import base64
    import io

    from PIL import Image

    found = []
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            if "image/png" not in o.get("data", {}):
                continue
            im = Image.open(io.BytesIO(base64.b64decode("".join(o["data"]["image/png"]))))
            dpi = (im.info.get("dpi") or (72, 72))[0]
            css_w = float((o.get("metadata", {}).get("image/png") or {}).get("width") or im.width)
            shown = min(css_w, OUTPUT_AREA_PX)
            px = MIN_FONT_PT * dpi / 72 * shown / im.width
            if px < MIN_TEXT_PX:
                found.append(f"cell {i}: a {im.width} px picture at {dpi:.0f} dpi shown {shown:.0f} px wide: "
                             f"{MIN_FONT_PT} pt text is {px:.1f} px (at least {MIN_TEXT_PX})")
    return found


_ROW = re.compile(r"<tr[^>]*>(.*?)</tr>", re.S)
_CELL = re.compile(r"<t([hd])[^>]*>(.*?)</t[hd]>", re.S)


# the doctor's cause columns: a 0 there says "none of this cause", the table's point
DOCTOR_CAUSES = ("memcpy", "communication", "dataloader", "input", "sync", "compute", "idle", "other")


def zero_columns(nb: dict) -> list[str]:
    """Time columns (``(ms)`` in the name) of a shown HTML table of two rows or more where every cell reads 0: a
    measurement that measured nothing (02's ``cpu exec (ms)``); the doctor's cause columns are allowed."""
    found = []
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            html = "".join(o.get("data", {}).get("text/html", ""))
            for table in re.findall(r"<table.*?</table>", html, re.S):
                rows = [[(k, re.sub(r"<[^>]+>", "", v).strip()) for k, v in _CELL.findall(r)]
                        for r in _ROW.findall(table)]
                head = next((r for r in rows if r and all(k == "h" for k, _ in r)), None)
                body = [r for r in rows if any(k == "d" for k, _ in r)]
                if not head or len(body) < 2:
                    continue
                for j, (_, name) in enumerate(head):
                    if "(ms)" not in name or name.split(" (")[0].strip().lower() in DOCTOR_CAUSES:
                        continue
                    vals = [r[j][1] for r in body if j < len(r)]
                    if len(vals) == len(body) and all(re.fullmatch(r"-?0(\.0*)?", v) for v in vals):
                        found.append(f"cell {i}: the column {name!r} is 0 in all {len(vals)} rows")
    return found


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_what_a_reader_sees(src):
    """Issue 33: every picture the markdown promises is there, chart text is readable at its displayed size, and no
    shown table has an all-zero column."""
    nb = _executed(src.stem)
    found = missing_figures(nb) + small_chart_text(nb) + zero_columns(nb)
    assert not found, f"{src.stem}:\n" + "\n".join(found)


def _png(width_px: int, dpi: float) -> str:
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width_px, 10)).save(buf, "png", dpi=(dpi, dpi))
    return base64.b64encode(buf.getvalue()).decode()


def test_what_a_reader_sees_is_checked():
    img = lambda w, dpi=100: {"output_type": "display_data", "data": {"image/png": _png(w, dpi)}, "metadata": {}}  # noqa
    promised = _nb(markdown="Each rank's step drawn as a timeline:")
    assert missing_figures(promised) == [
        "cell 1: the markdown above promises 'drawn'; the cell shows no picture"]
    assert missing_figures(_nb(markdown="then the loss curves of the matrix's cells"))
    assert missing_figures(_nb(img(900), markdown="The timeline below:")) == []
    assert missing_figures(_nb(markdown="the H100's figures beside this run's")) == []
    assert small_chart_text(_nb(img(900))) == [] and small_chart_text(_nb(img(1031, 110))) == []
    assert small_chart_text(_nb(img(1639, 110)))  # the H100 reference's 3-panel matrix chart: 6 px text
    assert small_chart_text(_nb(img(1507)))
    table = lambda rows: {"output_type": "display_data", "metadata": {}, "data": {"text/html": (  # noqa: E731
        "<table><thead><tr><th></th><th>op</th><th>cpu exec (ms)</th></tr></thead><tbody>"
        + "".join(f"<tr><th>{k}</th><td>aten::mm</td><td>{v}</td></tr>" for k, v in enumerate(rows))
        + "</tbody></table>")}}
    assert zero_columns(_nb(table(["0.00", "0.0", "0"]))) == ["cell 1: the column 'cpu exec (ms)' is 0 in all 3 rows"]
    assert zero_columns(_nb(table(["0.00", "1.5"]))) == [] and zero_columns(_nb(table(["0"]))) == []


def checkout_paths(nb: dict, roots: list[str]) -> list[str]:
    """One line per output naming one of ``roots`` (the checkout's absolute path, the executed copies' folder)."""
    found = []
    for i, c in enumerate(nb["cells"]):
        for o in c.get("outputs", []):
            text = _text(o)
            for root in roots:
                at = text.find(root)
                if at >= 0:
                    found.append(f"cell {i}: {text[at:at + 120].splitlines()[0]}")
    return found


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_no_output_names_the_checkouts_absolute_path(src):
    """A learner's outputs show paths relative to the notebook's folder: an absolute one names the checkout (CI's sits
    under /tmp, which ../shared/checks/reader.py counts as a leak) and does not open on anyone else's machine."""
    path = _executed_path(src.stem)
    roots = sorted({str(ROOT), str(path.parent.resolve())}, key=len, reverse=True)
    found = checkout_paths(_executed(src.stem), roots)
    assert not found, f"{src.name} prints absolute paths: " + "; ".join(found[:3])


def test_an_absolute_path_in_an_output_is_found():
    nb = {"cells": [{"outputs": [{"output_type": "stream", "text": "Writing /x/checkout/runs/a.py\n"}]},
                    {"outputs": [{"output_type": "stream", "text": "Writing ../runs/a.py\n"}]}]}
    assert checkout_paths(nb, ["/x/checkout"]) == ["cell 0: /x/checkout/runs/a.py"]
