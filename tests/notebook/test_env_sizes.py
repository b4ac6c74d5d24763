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


# Issue 31: a GPU machine is lent 15 minutes at a time (one command at most 10), so every notebook's full-scale run
# carries a time guard (budget_s, helpers.notebook.budget) of at most 300 s and the six fit 700 s together.
FULL_BUDGET_EACH_S, FULL_BUDGET_ALL_S = 300, 700
SIX = ("PROFILER_BASICS", "DATA_PIPELINE", "BACKWARD_HOOKS", "TORCH_COMPILE", "DIAGNOSE", "DISTRIBUTED")


def test_every_notebook_fits_a_gpu_lease_at_full_scale():
    from helpers.notebook import sizes

    budgets = {}
    for name in SIX:
        full = getattr(sizes, name)["full"]
        assert isinstance(full.get("budget_s"), (int, float)), f"{name}['full'] has no time guard (budget_s)"
        assert 0 < full["budget_s"] <= FULL_BUDGET_EACH_S, f"{name}: budget_s {full['budget_s']} > {FULL_BUDGET_EACH_S}"
        assert 0 <= full.get("reserve_s", 0) < full["budget_s"]
        budgets[name] = full["budget_s"]
    assert sum(budgets.values()) <= FULL_BUDGET_ALL_S, f"full budgets {budgets} sum to {sum(budgets.values())} s"
