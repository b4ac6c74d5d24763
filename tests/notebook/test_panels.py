"""helpers.notebook.panels: the panel refuses bad values and runs the experiment with good ones."""

from helpers.measure.validate import validate_batch_size
from helpers.notebook import panels as widgets


def test_panel_click_refuses_then_runs():
    import ipywidgets as W

    seen = []
    bs = W.IntText(value=0)

    def validate(v):
        return {"batch_size": validate_batch_size(v["batch_size"])}

    panel = widgets.run_panel(lambda batch_size: seen.append(batch_size) or batch_size, {"batch_size": bs},
                              validate=validate, show=lambda r: None)
    panel.click()
    assert seen == [] and "Refused" in panel.status.value
    bs.value = 8
    panel.click()
    assert seen == [8] and "Done" in panel.status.value


def test_panel_reports_failure_without_raising():
    import ipywidgets as W

    def run(x):
        raise RuntimeError("kaput")

    panel = widgets.run_panel(run, {"x": W.IntText(value=1)})
    panel.click()
    assert "Failed" in panel.status.value and "kaput" in panel.status.value


def test_panel_says_failed_over_a_failed_row_not_done(tmp_path):
    """A run that records a failed row (05's panel at a size the plant cannot build) is reported as failed, with the
    row's one-line error; a run that adds an ok row says Done."""
    import ipywidgets as W
    from helpers.notebook.results import Results

    res = Results("panel_test", "smoke", root=tmp_path)

    def run(size):
        if size > 10:
            res.add(f"planted input (size {size:g})", {"size": size}, status="failed",
                    error="OverflowError: timestamp out of range")
        else:
            res.add(f"planted input (size {size:g})", {"size": size}, {"step_ms_mean": 1.0})

    size = W.FloatText(value=1e300)
    panel = widgets.run_panel(run, {"size": size}, results=res, show=lambda r: None)
    panel.click()
    assert "Done" not in panel.status.value and "Failed" in panel.status.value
    assert "OverflowError: timestamp out of range" in panel.status.value and "planted input" in panel.status.value
    size.value = 2
    panel.click()
    assert "Done" in panel.status.value and "Failed" not in panel.status.value


def test_failed_line_is_one_line_and_counts_the_rest():
    rows = [{"name": "a", "error": "ValueError: bad\nsecond line"}, {"name": "b", "error": "x"}]
    line = widgets.failed_line(rows)
    assert "\n" not in line and line.startswith("a: ValueError: bad") and "1 more" in line


def test_every_panel_label_has_room():
    """No control keeps ipywidgets' fixed label width, which cuts "num_workers" to "num_work…" (issue 33)."""
    import ipywidgets as W

    controls = {"num_workers": W.BoundedIntText(description="num_workers"),
                "accum": W.BoundedIntText(description="accum steps"),
                "flag": W.Checkbox(description="persistent_workers"),
                "kind": W.Dropdown(options=["a"], description="bottleneck"),
                "box": W.HBox([W.FloatText(description="a very long label indeed")])}
    widgets.run_panel(lambda **kw: None, controls)
    labelled = [*list(controls.values())[:4], controls["box"].children[0]]
    assert all(c.style.description_width == "initial" for c in labelled)


def test_notebook_panels_pass_their_results(tmp_path):
    """02's panel (built in helpers) hands its results to run_panel, so a failed row reads as failed."""
    from helpers.lessons import data_pipeline as dp
    from helpers.notebook.results import Results

    res = Results("panel_test", "smoke", root=tmp_path)

    def measure_row(name, values):
        res.add(name, values, status="failed", error="RuntimeError: worker died")

    panel = dp.experiment.panel(res, measure_row, num_workers=0, batch_size=8, cores=2, on_gpu=False)
    panel.click()
    assert "Failed" in panel.status.value and "worker died" in panel.status.value


def _row(name, cfg, mean, p25=None, p75=None, first=None, status="ok", **more):
    m = {"step_ms_mean": mean, "step_ms_p25": p25, "step_ms_p75": p75, "first_step_ms": first, "steps_timed": 10}
    return {"name": name, "config": cfg, "status": status, "metrics": {k: v for k, v in (m | more).items()
                                                                        if v is not None}}


def test_same_setting_finds_the_earlier_readings_of_the_panels_setting():
    """01's panel re-times `step bs=8 fp32`: that row and the interleaved ones (which differ only in how they were
    taken) are readings of the same setting; another precision or a failed row is not."""
    cfg = {"batch_size": 8, "precision": "fp32", "deterministic": False}
    earlier = [_row("train_step", {"batch_size": 8, "profiled": False}, 11.0, 10.7, 11.3),
               _row("step (rounds, profiled)", cfg | {"profiled": True}, 12.4, 11.0, 13.8),
               _row("step bs=8 fp32", cfg, 15.4, 15.0, 15.9, first=16.0),
               _row("step bs=8 bf16", cfg | {"precision": "bf16"}, 57.5),
               _row("step bs=8 fp32", cfg, None, status="failed")]
    panel = _row("step bs=8 fp32", cfg, 497.0, 450.0, 560.0, first=1200.0)
    table, line = widgets.same_setting(earlier, panel)
    assert list(table.data["reading"]) == ["step (rounds, profiled)", "step bs=8 fp32", "this panel (step bs=8 fp32)"]
    assert "\n" not in line and line.startswith(
        "Same setting, measured earlier too: this panel (step bs=8 fp32) reads 32.27x step bs=8 fp32")
    assert "(497.0 against 15.4 ms)" in line and "15.0-15.9 against 450.0-560.0 ms, neither holding" in line
    assert widgets.same_setting(earlier, _row("x", {"batch_size": 64, "precision": "fp32"}, 30.0)) is None
    assert widgets.same_setting(earlier, _row("x", cfg, None, status="failed")) is None


def test_why_they_differ_says_noise_when_the_middle_halves_overlap_and_names_the_profiler():
    def r(mean, p25, p75, profiled=None, rounds=None, name="x"):
        return {"reading": name, "step_ms_mean": mean, "step_ms_p25": p25, "step_ms_p75": p75, "profiled": profiled,
                "rounds": rounds, "first_step_ms": None}

    assert "one setting, within noise" in widgets.why_they_differ(r(78.8, 70.0, 105.0), r(103.2, 75.0, 120.0))
    # the middle halves overlap but a mean lies outside the other's: not noise
    assert "neither holding" in widgets.why_they_differ(r(78.8, 70.0, 90.0), r(103.2, 85.0, 120.0))
    # round means, where a row has them, judge the noise (02's baseline against its sweep point)
    base = r(110.3, 23.6, 210.9, name="baseline") | {"round_means_ms": [119.1, 131.2, 100.0, 139.0, 62.3],
                                                     "step_ms_median": 65.4}
    line = widgets.why_they_differ(base, r(53.4, 18.4, 86.6, name="sweep nw=2") | {"round_means_ms": [50.3, 58.0]})
    assert "spread (round means): 62.3-139.0 against 50.3-58.0 ms" in line
    assert "baseline's mean is pulled up by a tail of long steps (median 65.4 ms)" in line
    line = widgets.why_they_differ(r(10.0, 9.5, 10.5, "no", 5, "baseline"), r(14.0, 13.5, 14.5, "yes", 1, "panel"))
    assert line.startswith("panel reads 1.40x baseline (14.0 against 10.0 ms)")
    assert "panel ran under the profiler" in line and "baseline pooled 5 interleaved round(s), panel 1" in line
    assert "no spread was recorded" in widgets.why_they_differ(r(10.0, None, None), r(20.0, None, None))
    assert "no mean step" in widgets.why_they_differ(widgets.reading(None), r(20.0, None, None))


def test_panel_prints_both_readings_when_it_re_measures_a_setting(tmp_path, capsys):
    import ipywidgets as W
    from helpers.notebook.results import Results

    res = Results("panel_test", "smoke", root=tmp_path)
    res.add("baseline", {"variant": "baseline", "num_workers": 2, "rounds": 5},
            {"step_ms_mean": 78.8, "step_ms_p25": 70.0, "step_ms_p75": 85.0})

    def run(num_workers):
        res.add(f"panel nw={num_workers}", {"variant": "baseline", "num_workers": num_workers, "rounds": 1,
                                            "persistent_workers": False},
                {"step_ms_mean": 121.9, "step_ms_p25": 110.0, "step_ms_p75": 130.0})

    nw = W.IntText(value=2)
    panel = widgets.run_panel(run, {"num_workers": nw}, results=res, show=lambda r: None)
    panel.click()
    out = capsys.readouterr().out
    assert "this panel (panel nw=2)" in out and "baseline" in out
    assert "Same setting, measured earlier too: this panel (panel nw=2) reads 1.55x baseline" in out and "pooled 5" in out
    nw.value = 1
    panel.click()
    assert "Same setting" not in capsys.readouterr().out   # a setting nothing measured before: no comparison


def test_every_notebooks_panel_hands_over_its_results():
    """01, 03, 04, 05 and 06 build their panels in a cell: each passes its results, so a failed row reads "Failed" and a
    re-measured setting is set beside its earlier reading (02 builds its panel in helpers; tested above)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "notebooks"
    for name in ("01_profiler_basics", "03_backward_hooks", "04_torch_compile", "05_diagnose", "06_distributed"):
        cells = json.loads((root / f"{name}.ipynb").read_text())["cells"]
        calls = ["".join(c["source"]) for c in cells if "panels.run_panel(" in "".join(c["source"])]
        assert calls and all("results=RESULTS" in c for c in calls), name
