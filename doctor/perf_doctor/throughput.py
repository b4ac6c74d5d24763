"""Achieved throughput of matrix operators: FLOPs from the shapes a trace recorded (``record_shapes=True``), the
device time of the kernels they launched, and the device's dense peak for their data type. Used by
``views.Trace.operators`` (``tflops``, ``peak_pct``) and the doctor's report (``throughput``, the TF32 advice)."""

from __future__ import annotations

import bisect
import math
import re

from . import events as ev
from .kernels import kernel_dtype

# Peak dense throughput, TFLOP/s (TOPS for int8), by device and data type. Sources: the vendors' data sheets, the
# dense figures (the sheets' "with sparsity" figures are twice these):
#   NVIDIA H100 Tensor Core GPU datasheet (H100 SXM5): FP64 34 (FP64 tensor 67), FP32 67, TF32 494.7, BF16/FP16
#     989.4, FP8 1978.9, INT8 1978.9;
#   NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): the same tensor throughput as the H100 SXM;
#   NVIDIA A100 Tensor Core GPU datasheet: FP64 9.7 (tensor 19.5), FP32 19.5, TF32 156, BF16/FP16 312, INT8 624;
#   NVIDIA V100 datasheet (V100 SXM2): FP64 7.8, FP32 15.7, FP16 tensor 125 (no TF32, BF16, FP8);
#   AMD Instinct MI300X data sheet: FP64 81.7 (matrix 163.4), FP32 163.4, TF32 653.7, BF16/FP16 1307.4,
#     FP8 2614.9, INT8 2614.9;
#   NVIDIA L4 datasheet: FP32 30.3, TF32 60, BF16/FP16 121, FP8 242.5, INT8 242.5.
_H100 = {
    "fp64": 67.0,
    "fp32": 67.0,
    "tf32": 494.7,
    "fp16": 989.4,
    "bf16": 989.4,
    "fp8": 1978.9,
    "int8": 1978.9,
}
PEAK_TFLOPS = {
    "H100": _H100,
    "H200": _H100,
    "A100": {
        "fp64": 19.5,
        "fp32": 19.5,
        "tf32": 156.0,
        "fp16": 312.0,
        "bf16": 312.0,
        "int8": 624.0,
    },
    "V100": {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0},
    "MI300X": {
        "fp64": 163.4,
        "fp32": 163.4,
        "tf32": 653.7,
        "fp16": 1307.4,
        "bf16": 1307.4,
        "fp8": 2614.9,
        "int8": 2614.9,
    },
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "fp8": 242.5, "int8": 242.5},
}


def device_model(device_name: str | None) -> str | None:
    """The ``PEAK_TFLOPS`` key of a ``deviceProperties`` name ("NVIDIA H100 80GB HBM3" -> "H100"; not PCIe/NVL)."""
    n = str(device_name or "").upper()
    if "H100" in n and ("PCIE" in n or "NVL" in n):
        return None
    for key in ("MI300X", "H200", "H100", "A100", "V100", "L4"):
        if re.search(rf"(?<![A-Z0-9]){key}(?![0-9])", n):
            return key
    return None


def peak_tflops(device_name: str | None, dtype: str | None) -> float | None:
    """The device's dense peak for ``dtype`` (``PEAK_TFLOPS``), or None where the table has none."""
    model = device_model(device_name)
    return PEAK_TFLOPS.get(model, {}).get(dtype) if model and dtype else None


MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::matmul",
    "aten::linear",
)
CONV_OPS = (
    "aten::convolution",
    "aten::_convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::cudnn_convolution",
    "aten::miopen_convolution",
    "aten::mkldnn_convolution",
)


def op_flops(name: str, dims) -> float | None:
    """FLOPs of one matmul or convolution call from its ``Input Dims``: 2·M·N·K (times the batch), or for a
    convolution 2·N·C_out·(C_in/groups)·k·out (out: the input's size, refined by ``_conv_out_ratio``); else None."""
    try:
        d = [list(map(int, x)) if isinstance(x, (list, tuple)) else [] for x in dims]
        if name in (
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "aten::baddbmm",
        ):  # (input,) [B,] M x K, [B,] K x N
            i, rank = int(name.endswith(("addmm", "addbmm"))), 3 if "bmm" in name else 2
            if len(d) >= i + 2 and len(d[i]) == rank == len(d[i + 1]):
                return 2.0 * math.prod(d[i]) * d[i + 1][-1]
        if name == "aten::linear" and len(d) >= 2 and d[0] and len(d[1]) == 2:
            return 2.0 * math.prod(d[0][:-1]) * d[0][-1] * d[1][0]
        if name == "aten::matmul" and len(d) >= 2 and d[0] and d[1]:
            a, b = d[0], d[1]
            if len(b) == 1:
                return 2.0 * math.prod(a)
            return (
                2.0
                * math.prod(a[:-1])
                * a[-1]
                * b[-1]
                * (math.prod(b[:-2]) // max(math.prod(a[:-2]), 1) or 1)
            )
        if name in CONV_OPS and len(d) >= 2 and len(d[0]) >= 3 and len(d[0]) == len(d[1]):
            x, w = d[0], d[1]
            return (
                2.0 * x[0] * w[0] * math.prod(w[1:]) * math.prod(x[2:])
            )  # refined by conv_out in op_throughput
    except (TypeError, ValueError):
        return None
    return None


# where stride, padding and dilation sit in a convolution's recorded arguments (PyTorch's signatures)
_CONV_ARGS = {
    "aten::cudnn_convolution": (3, 2, 4),
    "aten::miopen_convolution": (4, 3, 5),
    "aten::mkldnn_convolution": (4, 3, 5),
}


def _conv_out_ratio(x: list[int], w: list[int], concrete, name: str = "") -> float:
    """A convolution call's output over input positions (stride, padding, dilation from ``Concrete Inputs``)."""

    def ints(s):
        try:
            return [int(v) for v in str(s).strip("[] ").split(",") if v.strip()]
        except ValueError:
            return []

    c = list(concrete or [])
    stride, pad, dil = (ints(c[i]) if len(c) > i else [] for i in _CONV_ARGS.get(name, (3, 4, 5)))
    ratio = 1.0
    for i, n in enumerate(x[2:]):
        s, p, dd = (
            v[i] if i < len(v) else default for v, default in ((stride, 1), (pad, 0), (dil, 1))
        )
        out = (n + 2 * p - dd * (w[2 + i] - 1) - 1) // max(s, 1) + 1
        ratio *= max(out, 0) / n if n else 0.0
    return ratio


THROUGHPUT_COLUMNS = [
    "name",
    "calls",
    "gflop",
    "device_ms",
    "tflops",
    "dtype",
    "peak_tflops",
    "peak_pct",
]
# An FP32 matrix product under this share of the device's TF32 peak is far under what TF32 would give: the advice
FAR_UNDER_PEAK = 0.5


def op_throughput(trace) -> list[dict]:
    """Achieved TFLOP/s of matmul/conv operators with recorded shapes, a row per name (``THROUGHPUT_COLUMNS``):
    FLOPs (``op_flops``) over their kernels' device time, main ``kernel_dtype`` and its peak; ``outer``: not nested."""
    evs = ev.complete(trace)
    props = trace.get("deviceProperties") if isinstance(trace, dict) else None
    device = next(
        (p.get("name") for p in props or [] if isinstance(p, dict) and p.get("name")), None
    )
    wanted = set(MATMUL_OPS) | set(CONV_OPS)
    calls = sorted(
        (
            e
            for e in evs
            if ev.kind(e) == "op" and e.get("name") in wanted and ev.args(e).get("Input Dims")
        ),
        key=lambda e: (e.get("pid"), e.get("tid"), float(e["ts"]), -float(e["dur"])),
    )
    if not calls:
        return []
    kern: dict = {}
    for e in evs:
        if ev.kind(e) == "kernel" and ev.corr(e) is not None:
            kern.setdefault(ev.corr(e), []).append(e)
    by_thread: dict = {}
    for e in evs:
        if ev.is_launch(e) and ev.corr(e) in kern:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(
                (float(e["ts"]), ev.corr(e))
            )
    for v in by_thread.values():
        v.sort()
    rows: dict[str, dict] = {}
    end_outer = {}
    for e in calls:
        key = (e.get("pid"), e.get("tid"))
        a, b = ev.span(e)
        outer = a >= end_outer.get(key, -1.0)  # not inside another matmul/conv call
        if outer:
            end_outer[key] = b
        name = str(e["name"])
        a_ = ev.args(e)
        dims = a_.get("Input Dims")
        flops = op_flops(name, dims)
        if flops and name in CONV_OPS:
            x, w = [list(map(int, v)) for v in dims[:2]]
            flops *= _conv_out_ratio(x, w, a_.get("Concrete Inputs"), name)
        launches = by_thread.get(key, [])
        i = bisect.bisect_left(launches, (a, -math.inf))
        dev_us, by_dt = 0.0, {}
        while i < len(launches) and launches[i][0] <= b:
            for k in kern[launches[i][1]]:
                d = float(k["dur"])
                dev_us += d
                if dt := kernel_dtype(str(k.get("name", ""))):
                    by_dt[dt] = by_dt.get(dt, 0.0) + d
            i += 1
        r = rows.setdefault(
            name, {"name": name, "calls": 0, "flop": 0.0, "us": 0.0, "by_dt": {}, "outer": False}
        )
        r["calls"] += 1
        r["outer"] |= outer
        if flops and dev_us > 0:
            r["flop"] += flops
            r["us"] += dev_us
            for dt, d in by_dt.items():
                r["by_dt"][dt] = r["by_dt"].get(dt, 0.0) + d
    out = []
    for r in rows.values():
        if r["us"] <= 0:
            continue
        dt = max(r["by_dt"], key=r["by_dt"].get) if r["by_dt"] else None
        tf = r["flop"] / r["us"] / 1e6
        peak = peak_tflops(device, dt)
        out.append(
            {
                "name": r["name"],
                "calls": r["calls"],
                "gflop": round(r["flop"] / 1e9, 3),
                "device_ms": round(r["us"] / 1000.0, 3),
                "tflops": round(tf, 2),
                "dtype": dt,
                "peak_tflops": peak,
                "peak_pct": round(100.0 * tf / peak, 1) if peak else None,
                "device": device,
                "outer": r["outer"],
            }
        )
    return sorted(out, key=lambda r: -r["device_ms"])


def throughput_advice(rows: list[dict]) -> list[str]:
    """One line per FP32 matrix product far under its device's TF32 peak: ``set_float32_matmul_precision``."""
    out = []
    for r in rows:
        if r.get("dtype") != "fp32" or not r.get("outer", True):
            continue
        model = device_model(r.get("device"))
        tf32 = PEAK_TFLOPS.get(model or "", {}).get("tf32")
        if not tf32 or r["tflops"] >= FAR_UNDER_PEAK * tf32:
            continue
        peak = r.get("peak_tflops")
        of_fp32 = f" ({r['peak_pct']:.0f}% of the FP32 peak {peak:g})" if peak else ""
        out.append(
            f"{r['name']}: {r['tflops']:.1f} TFLOP/s in FP32{of_fp32}, {100 * r['tflops'] / tf32:.0f}% of "
            f'the {model}\'s TF32 peak ({tf32:g}): torch.set_float32_matmul_precision("high") runs it on '
            f"TF32 tensor cores (04_torch_compile: the precision matrix)"
        )
    return out
