"""helpers.lessons.backward_hooks.findings (notebook 03): this run's findings in words, whether the article's hotspot
is this machine's, and a reference GPU run's figures. Synthetic tables; structure and wording, never timings."""
import json

import pandas as pd
import pytest

from helpers.lessons import backward_hooks as hooks
from helpers.measure.timing import StepTimes
from helpers.notebook import reference


def _ops(rows, gpu=False):
    """A two-clocks table (``readings.two_clocks``), ranked by host time."""
    df = pd.DataFrame(rows, columns=["op", "host_ms", "device_ms", "syncs", "gpu_idle_ms"])
    df = df.sort_values("host_ms", ascending=False).reset_index(drop=True)
    df["rank_by_host"] = range(1, len(df) + 1)
    df["rank_by_device"] = df["device_ms"].rank(ascending=False, method="first").astype(int)
    df["host_share"] = df["host_ms"] / df["host_ms"].sum()
    return df


CPU_OPS = _ops([("AddmmBackward0", 18.0, 0, 0, 0), ("ConvolutionBackward0", 5.0, 0, 0, 0),
                ("GatherBackward0", 0.1, 0, 0, 0)])
GPU_OPS = _ops([("AddmmBackward0", 2.0, 1.9, 0, 0), ("GatherBackward0", 9.0, 0.01, 1, 8.5)])


def test_clocks_finding_says_when_the_articles_hotspot_is_not_this_machines():
    cpu = hooks.clocks_finding(CPU_OPS, on_gpu=False)
    assert cpu.startswith("Top backward node by host time: **`AddmmBackward0`** (78% of")
    assert "`GatherBackward0`: #3 of 3 (0.4%)" in cpu and "not this machine's" in cpu and "no host-device sync" in cpu
    gpu = hooks.clocks_finding(GPU_OPS, on_gpu=True)
    assert "#1 of 2" in gpu and "#2 by device time, 1 syncs and 8.50 ms GPU idle per step" in gpu
    assert "As in the article, it tops the host clock." in gpu and "not this machine's" not in gpu
    assert "no `GatherBackward0` in this trace" in hooks.clocks_finding(CPU_OPS.iloc[:2], on_gpu=False)


def _modules(rows):
    return pd.DataFrame(rows, columns=["module", "depth", "backward_ms", "share"])


CHILDREN = _modules([("blocks", 1, 23.0, 0.77), ("patch_embed", 1, 3.2, 0.105), ("patch_drop", 1, 0.03, 0.001)])
ALL = _modules([("(model)", 0, 30.0, 0.99), ("blocks", 1, 20.0, 0.64), ("blocks.1", 2, 17.0, 0.56),
                ("blocks.1.mlp", 3, 10.0, 0.35), ("blocks.1.mlp.fc1", 4, 5.0, 0.19), ("patch_embed", 1, 5.0, 0.17),
                ("blocks.1.attn", 3, 3.0, 0.12), ("blocks.0", 2, 2.0, 0.08), ("blocks.1.mlp.fc2", 4, 2.0, 0.09),
                ("blocks.10", 2, 1.0, 0.03)])


def test_children_finding_follows_this_machines_data():
    text = hooks.children_finding(CHILDREN)
    assert text.startswith("Longest child backward: **`blocks`** (77%)")
    assert "`patch_drop`: 0.03 ms (0.1%), #3 of 3." in text and "the data here point into `blocks`" in text
    top = hooks.children_finding(CHILDREN.iloc[[2, 0, 1]].reset_index(drop=True))
    assert "As in the article, the suspect is the longest child." in top
    assert "no `patch_drop` span" in hooks.children_finding(CHILDREN.iloc[:2])


def test_hot_path_takes_the_longest_module_at_each_level_inside_the_last():
    path = hooks.hot_path(ALL)
    assert [p["module"] for p in path] == ["blocks", "blocks.1", "blocks.1.mlp", "blocks.1.mlp.fc1"]
    assert path[0]["share"] == pytest.approx(0.64)
    assert hooks.path_finding(path).endswith("`blocks` (64%) → `blocks.1` (56%) → `blocks.1.mlp` (35%) → "
                                             "`blocks.1.mlp.fc1` (19%).")
    assert hooks.hot_path(ALL.iloc[:1]) == [] and "No labelled module" in hooks.path_finding([])


def test_comparison_lines_give_milliseconds_only_for_a_resolved_difference():
    same = {"a": "det gather", "b": "det indexing", "metric": "step_ms_mean", "ratio": 1.01, "low": 0.95,
            "high": 1.06, "verdict": "no difference", "confidence": 0.95}
    slower = {"a": "plain", "b": "labelled", "metric": "step_ms_mean", "ratio": 0.65, "low": 0.6, "high": 0.7,
              "verdict": "slower", "confidence": 0.95}
    times = {(True, "gather"): StepTimes([10.0, 10.2]), (True, "indexing"): StepTimes([10.0, 10.0]),
             "plain": StepTimes([10.0, 12.0]), "labelled": StepTimes([17.0, 17.0])}
    lines = hooks.comparison_lines([same, slower], times).splitlines()
    assert lines[0] == ("- no difference between det indexing and det gather beyond this machine's noise: 1.01× "
                        "(95% interval 0.95–1.06)")
    assert lines[1] == "- labelled is slower than plain: 0.65× (95% interval 0.60–0.70): 6.00 ms per step more"
    assert hooks.comparison_lines([slower]).endswith("0.60–0.70)")                    # no times: no derived figure


def _reference(tmp_path, notes, figures=()):
    folder = tmp_path / "h100" / "03_backward_hooks"
    folder.mkdir(parents=True)
    doc = {"notebook": "03_backward_hooks", "scale": "full", "env": {"device_name": "NVIDIA H100", "torch": "2.11.0"},
           "experiments": [], "checks": {}, "notes": notes}
    (folder / "results.json").write_text(json.dumps(doc))
    for name in figures:
        (folder / f"{name}.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return reference.find("03_backward_hooks", root=tmp_path)


REF_NOTES = {"top_backward_node_by_host": "GatherBackward0",
             "gather_backward_two_clocks": {"host_ms": 9.0, "device_ms": 0.01, "rank_by_host": 1, "rank_by_device": 30,
                                            "syncs": 1.0, "gpu_idle_ms": 8.5, "host_share": 0.41},
             "top_module": "patch_drop", "top_module_backward_share": 0.4, "patch_drop_backward_share": 0.4,
             "syncs_per_step": {"det_gather": 1.0, "det_indexing": 0.0, "nondet_gather": 0.0, "nondet_indexing": 0.0},
             "sync_debug_warnings_det": {"gather": 1, "indexing": 0}}


def test_reference_lines_are_labelled_as_another_machines(tmp_path):
    ref = _reference(tmp_path, REF_NOTES)
    head = "**Reference, not this run** (h100 (NVIDIA H100, torch 2.11.0, full scale)): "
    assert hooks.reference_line(ref, "clocks") == (
        head + "top backward node by host time `GatherBackward0`; `GatherBackward0` #1 by host time (41.0%), #30 by "
        "device time, 1 syncs and 8.50 ms GPU idle per step.")
    assert hooks.reference_line(ref, "modules") == head + "longest child `patch_drop` (40%), `patch_drop` 40.0% of " \
                                                          "the backward."
    syncs = hooks.reference_line(ref, "syncs")
    assert "det gather 1, det indexing 0, nondet gather 0, nondet indexing 0" in syncs and "gather 1, indexing 0" in syncs
    assert hooks.reference_line(None, "clocks") is None
    bare = _reference(tmp_path / "bare", {})
    assert [hooks.reference_line(bare, w) for w in ("clocks", "modules", "syncs")] == [None, None, None]
    with pytest.raises(ValueError, match="unknown part"):
        hooks.reference_line(ref, "kernels")


def test_gpu_only_says_so_and_shows_the_reference(tmp_path, capsys, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    hooks.gpu_only("the article's sync", None, ["backward_hooks"])
    out = capsys.readouterr().out
    assert out.startswith("This machine has no GPU, so it cannot show the article's sync.")
    assert "No reference GPU run" in out and not shown
    ref = _reference(tmp_path, REF_NOTES, figures=["backward_hooks"])
    hooks.gpu_only("the article's sync", ref, ["backward_hooks"])
    texts = [getattr(o, "data", "") or "" for o in shown]
    assert any("syncs per backward" in t for t in texts) and any("Reference figure, not this run's" in t for t in texts)
