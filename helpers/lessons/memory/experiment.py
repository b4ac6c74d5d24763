"""Numbers for notebook 07: MemTracker's snapshots by category, the profiler's peak, the largest batch, snapshots."""

import copy
import itertools
import pickle
from pathlib import Path
from typing import Any, Callable

import torch
from torch.distributed._tools import mem_tracker as _mt

MB = 2**20
CATEGORIES = ("PARAM", "BUFFER", "GRAD", "OPT", "ACT", "TEMP", "INP", "OTH")


class MemoryInputError(ValueError):
    """A setting or a file this lesson cannot use; its message is one line for the reader."""


class PeakOnlyTracker(_mt.MemTracker):
    """MemTracker keeping its total peak only, not every module's at every operator (docs/lessons/07_memory.md);
    where this torch's MemTracker is laid out otherwise, MemTracker's own update."""

    def _update_peak_stats(self, peak_state) -> None:
        try:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap[_mt._TOTAL_KEY]:
                    self._peak_mem[dev] = snap[_mt._TOTAL_KEY]
                    self._peak_mem_snap[dev] = copy.deepcopy(snap)
        except AttributeError:
            super()._update_peak_stats(peak_state)


def by_category(snap: dict) -> dict[str, float]:
    """MemTracker's snapshot (device -> {category: bytes}) summed over devices, in MB, by category and in total."""
    out = dict.fromkeys([*CATEGORIES, "Total"], 0.0)
    for per_dev in snap.values():
        for key, v in per_dev.items():
            k = str(key).rsplit(".", 1)[-1]  # MemTracker's _MemRefType.ACT -> ACT
            if k in out:
                out[k] += v / MB
    return {**{k: round(out[k], 2) for k in CATEGORIES}, "total": round(out["Total"], 2)}


def module_peaks(mt) -> list[dict[str, Any]]:
    """Per module of a ``MemTracker`` that ran: the total MB live at its peak in forward and in backward."""
    rows = []
    for stats in mt.memory_tracking.values():
        fw, bw = (
            stats.snapshots.get(s, []) for s in (_mt._ModState.PEAK_FW, _mt._ModState.PEAK_BW)
        )
        rows.append(
            {
                "module": stats.mod_fqn,
                "peak_fw_mb": by_category(fw[-1])["total"] if fw else None,
                "peak_bw_mb": by_category(bw[-1])["total"] if bw else None,
            }
        )
    return rows


def profiler_peak_mb(step: Callable[[], Any]) -> float:
    """A step's peak MB allocated above what was live at its start: the running sum of the profiler's memory events
    (``profile_memory=True``), an independent reading of the allocator for the prediction's check on a CPU."""
    from torch.profiler import profile

    with profile(profile_memory=True) as prof:  # the CPU, and the GPU where there is one
        step()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    )
    running = itertools.accumulate(n for _, n in events)  # allocations > 0, frees < 0
    return round(max([0, *running]) / MB, 2)


def error_pct(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured, in percent."""
    if not measured:
        raise MemoryInputError("no measured peak to compare the prediction with")
    return round(100.0 * (predicted - measured) / measured, 1)


def largest_batch(fits: Callable[[int], bool], low: int, high: int, within: float = 0.0) -> int:
    """The largest batch in [low, high] for which ``fits(batch)`` is True (monotone), by bisection to ``within`` x
    the answer (0: exact; 1/32: 7-8 probes on [512, 524288], not 20); 0 when even ``low`` does not fit."""
    if low < 1 or high < low or not 0 <= within < 1:
        raise MemoryInputError(
            f"need 1 <= low <= high and 0 <= within < 1, not {low}, {high}, {within}"
        )
    if not fits(low):
        return 0
    while high - low > within * low:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def read_snapshot(path: str | Path) -> dict[str, Any]:
    """A snapshot of ``torch.cuda.memory._dump_snapshot``; ``MemoryInputError`` for a missing or damaged file."""
    p = Path(path)
    if not p.is_file():
        raise MemoryInputError(
            f"no memory snapshot at {p}: record one with _record_memory_history and _dump_snapshot"
        )
    try:
        snap = pickle.loads(p.read_bytes())
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a damaged file
        raise MemoryInputError(
            f"{p.name} is not a memory snapshot (damaged or another format: {type(exc).__name__})"
        ) from None
    if not isinstance(snap, dict) or "segments" not in snap:
        raise MemoryInputError(f"{p.name} is not a memory snapshot (no 'segments' in it)")
    return snap


def snapshot_summary(snap: dict[str, Any]) -> dict[str, float]:
    """Reserved and allocated MB in a snapshot's segments, and their difference (what the allocator holds unused)."""
    reserved = sum(s.get("total_size", 0) for s in snap["segments"]) / MB
    blocks = [b for s in snap["segments"] for b in s.get("blocks", [])]
    allocated = sum(b.get("size", 0) for b in blocks if b.get("state") == "active_allocated") / MB
    return {
        "segments": len(snap["segments"]),
        "reserved_mb": round(reserved, 1),
        "allocated_mb": round(allocated, 1),
        "unused_mb": round(reserved - allocated, 1),
    }


def levers_left(setting: dict) -> list[str]:
    """The levers a refusal can advise: those this lesson teaches that ``setting`` does not use yet."""
    left = ["a smaller batch"]
    if setting.get("checkpointing", "none") != "blocks":
        left.append("whole-block checkpointing")
    if setting.get("precision", "fp32") == "fp32":
        left.append("bf16")
    if not setting.get("in_backward", False):
        left.append("the optimizer step in backward")
    return left


def check_fits(predicted_mb: float, capacity_mb: float, setting: dict) -> None:
    """Refuse, before any allocation, a setting whose predicted peak exceeds the memory there is, advising only
    the levers it lacks."""
    if predicted_mb > capacity_mb:
        *most, last = levers_left(setting)
        advice = f"{', '.join(most)} or {last}" if most else last
        raise MemoryInputError(
            f"batch {setting.get('batch_size')} needs about {predicted_mb:,.0f} MB by the prediction; "
            f"this device has {capacity_mb:,.0f} MB available: choose {advice}"
        )


def live_mb(model: torch.nn.Module, *opts: torch.optim.Optimizer) -> float:
    """MB held between steps: parameters, buffers, gradients and the optimizers' state (each storage once)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    states = [v for o in opts for s in o.state.values() for v in s.values()]
    tensors = [*model.parameters(), *model.buffers(), *grads]
    tensors += [v for v in states if isinstance(v, torch.Tensor)]
    seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return round(sum(seen.values()) / MB, 2)


def capacity_mb(device: torch.device) -> float:
    """Memory a step may use: free GPU memory (``torch.cuda.mem_get_info``), or on a CPU the memory available to
    new allocations (``psutil``'s MemAvailable: free memory and the page cache the kernel can drop)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] / MB
    import psutil

    return psutil.virtual_memory().available / MB
