import pytest

from helpers import widgets


@pytest.mark.parametrize("bad", [-1, 10**6, 1.5, "2", True])
def test_num_workers_refused(bad):
    with pytest.raises(widgets.InvalidValue):
        widgets.validate_num_workers(bad, max_workers=8)


def test_num_workers_ok():
    assert widgets.validate_num_workers(0, 2) == 0
    assert widgets.validate_num_workers(2, 2) == 2


@pytest.mark.parametrize("bad", [0, -3, 10**6, None])
def test_batch_size_refused(bad):
    with pytest.raises(widgets.InvalidValue):
        widgets.validate_batch_size(bad)


def test_modes_and_precisions():
    assert widgets.validate_compile_mode("default", "cpu") == "default"
    with pytest.raises(widgets.InvalidValue, match="unknown compile mode"):
        widgets.validate_compile_mode("turbo", "cpu")
    with pytest.raises(widgets.InvalidValue, match="needs a GPU"):
        widgets.validate_compile_mode("reduce-overhead", "cpu")
    with pytest.raises(widgets.InvalidValue, match="GPUs"):
        widgets.validate_precision("fp16", "cpu")


def test_panel_click_refuses_then_runs():
    import ipywidgets as W

    seen = []
    bs = W.IntText(value=0)

    def validate(v):
        return {"batch_size": widgets.validate_batch_size(v["batch_size"])}

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
