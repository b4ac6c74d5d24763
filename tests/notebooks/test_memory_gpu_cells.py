"""07_memory's GPU-only cells, run on a CPU with the CUDA calls faked (the order of calls and what they record),
as if they ran on a GPU tomorrow: the levers' interleaved rounds time each step to the end of its GPU work, not to
its launch; the largest-batch search frees the levers' models first, catches the out-of-memory error and stops
within 1/32 of the limit; the baseline's peak is measured the way the rest of the notebook measures it."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from helpers.lessons import memory as mem

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_memory.ipynb"


def cell(containing: str) -> str:
    cells = [c for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"]
    found = ["".join(c["source"]) for c in cells if containing in "".join(c["source"])]
    assert len(found) == 1, f"{len(found)} code cells hold {containing!r}"
    return found[0]


class Clock:
    def __init__(self, calls):
        self.calls, self.t = calls, 0.0

    def perf_counter(self):
        self.calls.append("clock")
        self.t += 1.0
        return self.t


def test_each_timed_lever_step_ends_with_a_synchronize(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    ns = {"torch": torch, "time": Clock(calls), "ON_GPU": True, "ROUNDS": 2, "BASE": {}, "MICRO": 2,
          "make_step": lambda **s: lambda: calls.append("step"), "measure": lambda s: 1.0}
    exec(cell("for r in range(ROUNDS)"), ns)
    at = [i for i, c in enumerate(calls) if c == "step"]
    assert len(at) == 2 * len(ns["LEVERS"]) == 2 * len(ns["TIMED"]), calls  # a GPU times bf16 too
    assert all(calls[i - 1] == "clock" and calls[i + 1:i + 3] == ["sync", "clock"] for i in at), calls
    assert all(len(ns["TIMES"][n]) == 2 and ns["TIMES"][n][0] > 0 for n in ns["TIMED"])


def test_on_a_cpu_the_lever_rounds_time_the_process_cpu_clock(monkeypatch):
    """A CPU's rounds read ``time.process_time`` (a busy neighbour's time slices are not the step's: under load the
    checkpointing verdict flipped on wall time), and never synchronise a device."""
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: calls.append("sync"))
    clock = Clock(calls)
    clock.process_time, clock.perf_counter = clock.perf_counter, lambda: calls.append("wall") or 0.0
    ns = {"torch": torch, "time": clock, "ON_GPU": False, "ROUNDS": 2, "BASE": {}, "MICRO": 2,
          "make_step": lambda **s: lambda: calls.append("step"), "measure": lambda s: 1.0}
    exec(cell("for r in range(ROUNDS)"), ns)
    assert "sync" not in calls and "wall" not in calls and calls.count("clock") == 2 * calls.count("step") > 0
    assert all(len(ns["TIMES"][n]) == 2 and ns["TIMES"][n][0] > 0 for n in ns["TIMED"])
    assert ns["BF16_UNITS"] or "bf16 autocast" not in ns["TIMED"]  # not timed without bf16 units


def test_the_batch_search_frees_the_levers_catches_oom_and_stops_within_1_32(monkeypatch, capsys):
    limit, calls = 190_000, []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))

    def make_step(batch_size=512, **_):
        def step():
            calls.append(batch_size)
            if batch_size > limit:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 40.00 GiB")
        return step

    rows = {}
    ns = {"torch": torch, "mem": mem, "ON_GPU": True, "BASE": {}, "BATCH": 512, "PREDICTED": 1500.0,
          "P": {"search_high": 524_288}, "STEPS": {"baseline": object()}, "base_step": object(), "MT": object(),
          "make_step": make_step, "measure": lambda s: s() or 1510.0,
          "RESULTS": type("R", (), {"add": lambda self, name, cfg, m: rows.__setitem__(name, m)})()}
    exec(cell("def fits(batch)"), ns)
    assert ns["STEPS"] == {} and ns["base_step"] is None and ns["MT"] is None and calls[0] == "empty_cache"
    out = capsys.readouterr().out
    assert "out of memory, caught: CUDA out of memory" in out and "largest batch that fits:" in out
    found = rows["gpu largest batch"]
    assert limit * (1 - 1 / 32) <= found["largest_batch"] <= limit, found
    assert found["measured_mb"] == 1510.0 and found["predicted_mb"] == 1500.0
    probes = [c for c in calls if isinstance(c, int) and 512 < c <= 524_288]
    assert len(probes) <= 8, probes
