"""helpers.notebook.budget: the time guards, run on a CPU with tiny budgets (structure, not timings: every bound
below is generous next to the sub-second budgets)."""
import math
import threading
import time

import pytest

from helpers.notebook import budget as bg
from helpers.notebook.results import Results

ENV = {"python": "3", "torch": "t", "device": "cpu", "cpu_count": 2}


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_left_spent_and_reserve_on_a_fake_clock():
    clock = Clock()
    b = bg.Budget(60, reserve_s=10, clock=clock)
    assert b.left() == 50 and not b.spent()
    clock.t += 49
    assert not b.spent()
    clock.t += 1
    assert b.spent() and "60 s" in b.describe()
    unlimited = bg.Budget(None, clock=clock)
    assert unlimited.left() == math.inf and not unlimited.spent()


def test_from_env_takes_the_runners_budget_and_start():
    clock = Clock()
    assert bg.Budget.from_env(300, environ={}, clock=clock).seconds == 300
    b = bg.Budget.from_env(300, reserve_s=5, environ={bg.BUDGET_ENV: "42"}, clock=clock)
    assert b.seconds == 42 and b.reserve_s == 5
    # the runner started the notebook 20 s ago: that time counts
    b = bg.Budget.from_env(300, environ={bg.START_ENV: str(time.time() - 20)}, clock=clock)
    assert 19 < b.elapsed() < 30
    for bad in ("soon", "-3", "0", "nan"):
        with pytest.raises(ValueError, match=bg.BUDGET_ENV):
            bg.Budget.from_env(300, environ={bg.BUDGET_ENV: bad})
    with pytest.raises(ValueError, match="positive"):
        bg.Budget(0)


def test_a_tiny_budget_stops_the_running_experiment_and_skips_the_rest(tmp_path, capsys):
    """The guard as a notebook uses it: the first experiment is stopped while running, the next ones are skipped
    rows, and what follows (a check, the saved results) still runs."""
    r = Results("nb", "smoke", ENV, root=tmp_path)
    b = bg.Budget(0.5, reserve_s=0.1)
    t0 = time.perf_counter()

    def slow():
        while True:  # a training loop that would run past the deadline
            time.sleep(0.01)

    stopped = r.record("first", {"cell": 1}, slow, budget=b)
    assert time.perf_counter() - t0 < 5
    skipped = [r.record(f"cell {i}", {"cell": i}, lambda: {"x": 1}, budget=b) for i in (2, 3)]
    r.check("went_on_after_budget", True)
    assert stopped["status"] == "failed" and stopped["error"].startswith("OverBudget: stopped: over the time budget")
    assert all(s["status"] == "failed" and s["error"].startswith("OverBudget: skipped:") for s in skipped)
    assert "[failed] first: OverBudget: stopped" in capsys.readouterr().out
    saved = r.to_dict()
    assert [e["status"] for e in saved["experiments"]] == ["failed"] * 3 and saved["checks"]


def test_within_the_budget_an_experiment_runs_and_the_alarm_is_gone(tmp_path):
    import signal

    r = Results("nb", "smoke", ENV, root=tmp_path)
    b = bg.Budget(60)
    handler, (left, _) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's
    row = r.record("quick", {}, lambda: {"step_ms_median": 1.0}, budget=b)
    assert row["status"] == "ok"
    assert signal.getsignal(signal.SIGALRM) is handler
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (left > 0)  # ours is gone, an outer one is kept


def test_an_experiments_own_except_exception_does_not_swallow_the_stop():
    b = bg.Budget(0.3)

    def swallowing():
        for _ in range(1000):
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001 - what a careless experiment does
                pass
        return {"ran": "to the end"}

    with pytest.raises(bg.OverBudget, match="stopped"):
        b.wrap(swallowing)()


def test_torch_training_loop_and_dataloader_workers_are_stopped(tmp_path):
    """A CPU training loop fed by a DataLoader with a worker: stopped inside, its workers shut down, no hang."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 10_000

        def __getitem__(self, i):
            time.sleep(0.02)
            return torch.randn(8), torch.tensor(i % 2)

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        for x, y in DataLoader(Slow(), batch_size=4, num_workers=1):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return {"epochs": 1}

    r = Results("nb", "smoke", ENV, root=tmp_path)
    t0 = time.perf_counter()
    row = r.record("train", {"num_workers": 1}, train, budget=bg.Budget(1.5))
    assert row["status"] == "failed" and "stopped" in row["error"]
    assert time.perf_counter() - t0 < 30


def test_a_nested_limit_keeps_the_outer_alarm():
    import signal

    handler, (before, _) = signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's
    outer = bg.Budget(30)
    with outer.limit():
        with bg.Budget(60).limit(limit_s=0.2):  # a per-experiment limit inside
            pass
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 20 < left <= 30  # the outer alarm is set again
        with pytest.raises(bg.OverBudget):
            with bg.Budget(60).limit(limit_s=0.2):
                time.sleep(5)
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 20
    assert signal.getsignal(signal.SIGALRM) is handler
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 30) == (before > 30)


def test_outside_the_main_thread_it_still_skips_but_cannot_stop():
    out = {}

    def worker():
        out["can_alarm"] = bg.can_alarm()
        out["ran"] = bg.Budget(60).wrap(lambda: "done")()
        spent = bg.Budget(1e-6)
        time.sleep(0.01)
        try:
            spent.wrap(lambda: "not run")()
        except bg.OverBudget as exc:
            out["skipped"] = str(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join(30)
    assert out["can_alarm"] is False and out["ran"] == "done" and out["skipped"].startswith("skipped:")


class _SlowAfterFirst(__import__("torch").utils.data.Dataset):
    """Item 0 at once, every other item after 0.6 s: a worker still busy when its loader shuts down."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i:
            time.sleep(0.6)
        return i


def test_the_alarm_waits_for_a_dataloader_shutting_down_then_stops_the_block(monkeypatch):
    """The H100 run printed "Exception ignored in: _MultiProcessingDataLoaderIter.__del__ ... OverBudget": the
    alarm fired inside the loader's worker shutdown (a ``__del__``), where Python can only print and drop it. Here
    the alarm falls inside that shutdown (a worker busy 0.6 s, the alarm at 0.2 s): it waits for the shutdown to end,
    then stops the block, and nothing is printed as "Exception ignored"."""
    import sys

    from torch.utils.data import DataLoader
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    it = iter(DataLoader(_SlowAfterFirst(), batch_size=1, num_workers=1))
    assert next(it).tolist() == [0]
    with pytest.raises(bg.OverBudget, match="stopped"):
        with bg.alarm(0.2, "stopped: test"):
            del it                     # __del__ -> _shutdown_workers joins the busy worker: the alarm fires there
            time.sleep(0.5)            # the stop lands here, after the shutdown
    assert not unraisable, [u.exc_value for u in unraisable]
