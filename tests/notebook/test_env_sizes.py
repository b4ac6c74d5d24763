"""helpers.notebook.env.params with $PERF_SIZES: overrides of a notebook's sizes, refused in one line when wrong."""
import pytest

from helpers.notebook import env, sizes


def test_overrides_replace_the_named_sizes_and_are_listed():
    p = env.params(sizes.DATA_PIPELINE, "smoke", environ={"PERF_SIZES": '{"rounds": 2, "sweep_workers": [0, 2]}'})
    assert p["rounds"] == 2 and p["sweep_workers"] == [0, 2] and p["overrides"] == ["rounds", "sweep_workers"]
    assert p["cycles"] == sizes.DATA_PIPELINE["smoke"]["cycles"] and p["scale"] == "smoke"
    assert "overrides" not in env.params(sizes.DATA_PIPELINE, "smoke", environ={})


@pytest.mark.parametrize("raw, message", [("rounds=2", "is not a JSON object"), ("[1, 2]", "is not a JSON object"),
                                          ('{"roundz": 2}', "'roundz' not among this notebook's sizes")])
def test_a_bad_override_is_one_clear_line(raw, message):
    with pytest.raises(ValueError, match=message):
        env.params(sizes.DATA_PIPELINE, "smoke", environ={"PERF_SIZES": raw})
