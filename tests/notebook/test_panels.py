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
