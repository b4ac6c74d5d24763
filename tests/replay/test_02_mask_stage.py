"""Notebook 02's re-profile after the dilation fix, on the H100 traces: what remains in the mask stage once the
dilation is 50x cheaper is named (the H100 trace: ``masked_fill`` 1.1-1.6 ms and ``rand`` 0.3-0.5 ms per 256x256
sample), so a reader who sees the stage shrink less than the dilation knows where the rest went."""
import functools

from helpers.lessons.data_pipeline import views
from perf_doctor import load_trace

from .conftest import h100_trace

NB = "02_data_pipeline"


@functools.cache
def ops(variant):
    return views.mask_ops(load_trace(h100_trace(NB, f"{variant}_nw0")), top=4).set_index("op")


def test_the_mask_stage_after_the_dilation_fix_is_masked_fill_and_rand():
    t = ops("bool_dilation")
    assert list(t.index[:2]) == ["aten::masked_fill", "aten::rand"], t
    assert 1.0 < t.loc["aten::masked_fill", "ms_per_sample"] < 2.0 and 0.2 < t.loc["aten::rand", "ms_per_sample"] < 0.7
    assert 0.5 < t["share_of_stage"].sum() <= 1.0 + 1e-9


def test_in_the_baseline_the_dilation_itself_is_the_stage():
    t = ops("baseline")   # convolve2d runs in numpy/scipy: no operator, most of the stage
    assert t.index[0] == "(no operator: Python, numpy)" and t["share_of_stage"].iloc[0] > 0.5, t
