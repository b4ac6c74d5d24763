"""helpers.measure.validate: bad settings refused with a message."""
import pytest

from helpers.measure import validate as widgets


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


@pytest.mark.parametrize("bad", ["abc", "False", 1, 0, None, 0.0])
def test_bool_refused(bad):
    with pytest.raises(widgets.InvalidValue, match=r"^deterministic must be True or False, not .*\.$"):
        widgets.validate_bool(bad, "deterministic")


def test_bool_ok():
    import numpy as np

    assert widgets.validate_bool(True, "x") is True and widgets.validate_bool(False, "x") is False
    assert widgets.validate_bool(np.bool_(True), "x") is True


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "abc", True, None])
def test_positive_refuses_what_is_not_a_positive_finite_number(bad):
    with pytest.raises(widgets.InvalidValue, match="positive, finite"):
        widgets.validate_positive(bad, "size")


def test_positive_passes_numbers_through():
    assert widgets.validate_positive(2, "size") == 2 and widgets.validate_positive(0.5, "size") == 0.5


def test_one_spec_checks_a_panels_values():
    import pytest

    from helpers.measure.validate import Choice, InvalidValue, Whole, check_values

    spec = {"batch_size": Whole(1, 64), "model": Choice(("mlp", "cnn")), "precision": "precision",
            "deterministic": bool, "scale": float}
    good = {"batch_size": 8, "model": "cnn", "precision": "bf16", "deterministic": False, "scale": 0.5}
    assert check_values(good, spec) == good
    for bad, says in [({"batch_size": 0}, "at least 1"), ({"batch_size": 65}, "limit of 64"), ({"batch_size": 2.5}, "whole number"),
                      ({"model": "vit"}, "choose one of: mlp, cnn"), ({"precision": "fp16"}, "GPUs"),
                      ({"deterministic": "yes"}, "True or False"), ({"scale": 0}, "positive, finite"), ({"colour": 1}, "unknown setting")]:
        with pytest.raises(InvalidValue, match=says) as info:
            check_values(good | bad, spec)
        assert "\n" not in str(info.value)
