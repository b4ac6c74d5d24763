"""tests/conftest.py's order under pytest-xdist: the tests that mostly wait open different workers' shares."""
import conftest


def test_shares_match_worksteals_first_distribution():
    assert conftest.shares(836, 3) == [278, 279, 279] and sum(conftest.shares(10, 4)) == 10
    assert conftest.shares(2, 3) == [0, 1, 1]


def test_each_waiter_opens_a_share_and_nothing_is_lost():
    items = [f"t{i}" for i in range(10)]
    heads = ["t7", "t9"]
    out = conftest.spread(items, heads, 3)
    sizes = conftest.shares(10, 3)
    assert sorted(out) == sorted(items) and len(out) == 10
    assert out[0] == "t7" and out[sizes[0]] == "t9"
    assert [x for x in out if x not in heads] == [x for x in items if x not in heads]   # the rest keep their order
    assert conftest.spread(items, ["t1", "t2", "t3", "t4"], 2)[0::5] == ["t1", "t2"]   # extra heads stay in place
