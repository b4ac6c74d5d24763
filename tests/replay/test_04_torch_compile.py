"""Notebook 04 on the recorded H100 run (data/reference/h100/04_torch_compile, full scale: Swin-B and Swin-T fp16 at
batch 64, torch 2.11): the article table's like-for-like whole runs, the memory rows, the arithmetic behind the
Swin-T reversal, the TF32 warning's filter and text, and the full-scale sizing from the measured costs (the GPU
interleaving path's CPU stand-in is in tests/lessons/test_torch_compile_harness.py). Rows are named from sizes.TORCH_COMPILE["full"], as the notebook names the reference's."""
import functools
import json
import re
import warnings
from pathlib import Path


from helpers.lessons import torch_compile as cl
from helpers.notebook import reference, sizes
from helpers.notebook.results import Results

from .conftest import h100

NB = "04_torch_compile"
FULL = sizes.TORCH_COMPILE["full"]
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / f"{NB}.ipynb"


@functools.cache
def ref():
    return h100(NB)


def rn(model, mode):
    return cl.cell_name(model, "fp16", mode, FULL["batch_size"])


@functools.cache
def code_and_text():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return ("\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"),
            "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"))


def test_the_article_table_pairs_the_articles_whole_run_with_the_h100_run_of_the_same_length(tmp_path):
    # the article's whole-run 1.41x against the H100's whole run of the same length, not its steady 1.97x
    rows = cl.views.whole_run_rows(Results("04_r", "smoke", {}, root=tmp_path), ref(), 256, FULL["batch_size"])
    w = rows[0]["reference"]  # 10,419 steps of 112.6 ms: the article's 19:33 eager run
    assert (rows[0]["article_ratio"], round(w["ratio"], 2)) == (1.41, 1.71)
    assert w["steps"] == 10419 and w["low"] < 1.71 < w["high"] and ref().comparison(rn("swin_b", "eager"),
                                                                                    rn("swin_b", "default"))["ratio"] > 1.9
    table = reference.article_table(rows)
    assert table["H100 reference"][0].startswith("0.58× the time") and table["this run"][0] == reference.NOT_MEASURED


def test_the_swin_t_reversal_is_computed_from_the_steps_arithmetic():
    r = ref()
    rows = cl.views.whole_run_rows(None, r, 256, FULL["batch_size"])
    assert reference.agreement(rows[1]["article_ratio"], rows[1]["reference"]) == "no, reversed"
    gpu = r.doc["env"]["device_name"]
    eager = cl.views.compute_share("swin_t", FULL["batch_size"], r.metric(rn("swin_t", "eager"), "step_ms_median"), gpu)
    # ~1.7 TFLOP a step is ~1.7 ms at the H100's 989 TFLOP/s: 3% of the 56 ms eager step, so the step is host-bound
    assert 1.0 < eager["step_tflop"] < 2.0 and eager["compute_ms"] < 10 and eager["share"] < 0.1
    why = cl.swin_t_reversal(r, None, 256)  # the notebook's why follows the computed share
    assert why.startswith("H100 reference host-bound: the arithmetic is 3% of the eager step"), why


def test_the_memory_change_is_a_computed_row():
    r = ref()
    b = cl.views.memory_entry(r, rn("swin_b", "eager"), rn("swin_b", "default"))
    t = cl.views.memory_entry(r, rn("swin_t", "eager"), rn("swin_t", "default"))
    assert (b["pct"], t["pct"]) == (-10.7, -11.3)
    assert reference.agreement(0.9, b) == "yes"  # the article's Swin-B -10%
    assert reference.agreement(1.0, t) == "no (article: no effect)"  # the article's Swin-T: no change
    assert reference.ratio_text(b).startswith("0.89× the memory (-10.7% peak allocated, 10519 -> 9391 MB)")


def test_the_tf32_warning_is_filtered_and_its_text_is_right():
    code, text = code_and_text()
    pattern = re.search(r'warnings\.filterwarnings\(\s*"ignore",\s*message="([^"]+)",?\s*\)', code).group(1)
    msg = ("TensorFloat32 tensor cores for float32 matrix multiplication available but not enabled. Consider setting "
           "`torch.set_float32_matmul_precision('high')` for better performance.")  # torch 2.11's, as the H100 printed
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=pattern)
        warnings.warn(msg, UserWarning)
    assert seen == []
    assert "whatever the cell's precision" not in text and "fp32 matrix product on CUDA" in text
    docs = (NOTEBOOK.parents[1] / "docs" / "lessons" / "04_torch_compile.md").read_text()
    assert "is_tf32_warning_applicable" in docs  # the condition, in the lesson's notes


def test_full_scale_fits_its_budget_from_the_h100s_measured_costs():
    """Every row of the full run fits 220 s: the matrix is Swin-T's three cells (the measured eager and default
    cells, 40 s allowed for reduce-overhead), the graph-break cells run interleaved rounds, and later_s covers what
    the H100 measured after the matrix (graph-break cells, explain) plus the allowances for the rest."""
    r = ref()
    assert FULL["budget_s"] <= 220 and {c[0] for c in FULL["cells"]} == {"swin_t"}
    assert [c[2] for c in FULL["cells"]] == ["eager", "default", "reduce-overhead"]
    assert FULL["mlp_rounds"] >= 20 and FULL["interleave_rounds"] >= 20  # the break's cost is compared, interleaved

    def cell_s(name):  # first steps + steady steps; the model's build (~1 s) aside
        m = r.row(name)["metrics"]
        return m["first_steps_s"] + FULL["steps"] * m["step_ms_mean"] / 1000

    matrix = cell_s(rn("swin_t", "eager")) + cell_s(rn("swin_t", "default")) + 40 + 3  # + reduce-overhead, rounds
    mlp = sum(cell_s(cl.cell_name(n, "fp32", m, FULL["mlp_batch_size"])) for n in ("mlp_break", "mlp_fixed")
              for m in ("eager", "default"))
    measured_later = mlp + sum(r.metric(f"explain {n}", "explain_s") for n in FULL["explain_models"])
    assert measured_later + 25 + 30 + 5 <= FULL["later_s"]  # + starts, profiled pair, TensorBoard (allowances)
    assert 5 + 5 + matrix + FULL["later_s"] + FULL["reserve_s"] <= FULL["budget_s"]  # set-up, demo (allowance)
