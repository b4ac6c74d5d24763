"""Achieved throughput of matrix operators: FLOPs from the shapes a trace recorded (``record_shapes=True``), the
device time of the kernels they launched, and the device's dense peak for the data type those kernels ran in
(``kernels.kernel_dtype``). Used by the operators view (``views.Trace.operators``: ``tflops``, ``peak_pct``) and the
doctor's report (``throughput``, and the TF32 advice for an FP32 product far under the TF32 peak)."""
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
PEAK_TFLOPS = {
    "H100": {"fp64": 67.0, "fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9,
             "int8": 1978.9},
    "H200": {"fp64": 67.0, "fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9,
             "int8": 1978.9},
    "A100": {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "int8": 624.0},
    "V100": {"fp64": 7.8, "fp32": 15.7, "fp16": 125.0},
    "MI300X": {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9,
               "int8": 2614.9},
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "fp8": 242.5, "int8": 242.5},
}


def device_model(device_name: str | None) -> str | None:
    """The key of ``PEAK_TFLOPS`` for a device name as a trace's ``deviceProperties`` gives it ("NVIDIA H100 80GB
    HBM3" -> "H100"); None for another device, or an H100 PCIe / NVL (their peaks are lower: not in the table)."""
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


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
CONV_OPS = ("aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv2d", "aten::conv3d",
            "aten::cudnn_convolution", "aten::miopen_convolution", "aten::mkldnn_convolution")


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def op_flops(name: str, dims) -> float | None:
    """Floating-point operations of one call of a matmul or convolution operator from its recorded ``Input Dims``
    (``record_shapes=True``): 2·M·N·K for a product (batched: times the batch), 2·N·C_out·(C_in/groups)·k·out for
    a convolution (output size from stride, padding and dilation when the call recorded them, else the input's:
    a 'same' convolution). None for another operator or shapes that do not fit."""
    try:
        d = [list(map(int, x)) if isinstance(x, (list, tuple)) else [] for x in dims]
        if name in ("aten::mm",) and len(d) >= 2 and len(d[0]) == 2 and len(d[1]) == 2:
            return 2.0 * d[0][0] * d[0][1] * d[1][1]
        if name == "aten::addmm" and len(d) >= 3 and len(d[1]) == 2 and len(d[2]) == 2:
            return 2.0 * d[1][0] * d[1][1] * d[2][1]
        if name == "aten::bmm" and len(d) >= 2 and len(d[0]) == 3 and len(d[1]) == 3:
            return 2.0 * d[0][0] * d[0][1] * d[0][2] * d[1][2]
        if name == "aten::baddbmm" and len(d) >= 3 and len(d[1]) == 3 and len(d[2]) == 3:
            return 2.0 * d[1][0] * d[1][1] * d[1][2] * d[2][2]
        if name == "aten::linear" and len(d) >= 2 and d[0] and len(d[1]) == 2:
            return 2.0 * _prod(d[0][:-1]) * d[0][-1] * d[1][0]
        if name == "aten::matmul" and len(d) >= 2 and d[0] and d[1]:
            a, b = d[0], d[1]
            if len(b) == 1:
                return 2.0 * _prod(a)
            return 2.0 * _prod(a[:-1]) * a[-1] * b[-1] * (_prod(b[:-2]) // max(_prod(a[:-2]), 1) or 1)
        if name in CONV_OPS and len(d) >= 2 and len(d[0]) >= 3 and len(d[0]) == len(d[1]):
            x, w = d[0], d[1]
            return 2.0 * x[0] * w[0] * _prod(w[1:]) * _prod(x[2:])     # refined by conv_out in op_throughput
    except (TypeError, ValueError):
        return None
    return None


# where stride, padding and dilation sit in a convolution's recorded arguments (PyTorch's signatures)
_CONV_ARGS = {"aten::cudnn_convolution": (3, 2, 4), "aten::miopen_convolution": (4, 3, 5),
              "aten::mkldnn_convolution": (4, 3, 5)}


def _conv_out_ratio(x: list[int], w: list[int], concrete, name: str = "") -> float:
    """Output positions over input positions of a convolution call (stride, padding, dilation from its
    ``Concrete Inputs``: the strings "[2, 2]" PyTorch records; 1 when absent)."""
    def ints(s):
        try:
            return [int(v) for v in str(s).strip("[] ").split(",") if v.strip()]
        except ValueError:
            return []
    c = list(concrete or [])
    stride, pad, dil = (ints(c[i]) if len(c) > i else [] for i in _CONV_ARGS.get(name, (3, 4, 5)))
    ratio = 1.0
    for i, n in enumerate(x[2:]):
        k = w[2 + i]
        s = stride[i] if i < len(stride) else 1
        p = pad[i] if i < len(pad) else 0
        dd = dil[i] if i < len(dil) else 1
        out = (n + 2 * p - dd * (k - 1) - 1) // max(s, 1) + 1
        ratio *= max(out, 0) / n if n else 0.0
    return ratio


THROUGHPUT_COLUMNS = ["name", "calls", "gflop", "device_ms", "tflops", "dtype", "peak_tflops", "peak_pct"]
# An FP32 matrix product under this share of the device's TF32 peak is far under what TF32 would give: the advice
FAR_UNDER_PEAK = 0.5


def op_throughput(trace) -> list[dict]:
    """Achieved TFLOP/s of the matmul and convolution operators whose shapes the trace recorded (``Input Dims``:
    ``record_shapes=True``), one row per operator name (``THROUGHPUT_COLUMNS``): FLOPs from the shapes
    (``op_flops``), the device time of the kernels launched inside the calls (a launch on the call's thread within
    its host span, linked to its kernel by correlation id), the data type of those kernels (``kernel_dtype``, the
    one with the most time) and the device's dense peak for it (``PEAK_TFLOPS``; the device from the trace's
    ``deviceProperties``). Every operator name has its row (``aten::conv2d`` and the ``aten::miopen_convolution``
    inside it: the same work); ``outer`` marks the names called outside any other (a summary counts those only).
    [] when no call recorded shapes."""
    evs = ev.complete(trace)
    props = trace.get("deviceProperties") if isinstance(trace, dict) else None
    device = next((p.get("name") for p in props or [] if isinstance(p, dict) and p.get("name")), None)
    wanted = set(MATMUL_OPS) | set(CONV_OPS)
    calls = sorted((e for e in evs if ev.kind(e) == "op" and e.get("name") in wanted and ev.args(e).get("Input Dims")),
                   key=lambda e: (e.get("pid"), e.get("tid"), float(e["ts"]), -float(e["dur"])))
    if not calls:
        return []
    kern: dict = {}
    for e in evs:
        if ev.kind(e) == "kernel" and ev.corr(e) is not None:
            kern.setdefault(ev.corr(e), []).append(e)
    by_thread: dict = {}
    for e in evs:
        if ev.is_launch(e) and ev.corr(e) in kern:
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append((float(e["ts"]), ev.corr(e)))
    for v in by_thread.values():
        v.sort()
    rows: dict[str, dict] = {}
    end_outer = {}
    for e in calls:
        key = (e.get("pid"), e.get("tid"))
        a, b = ev.span(e)
        outer = a >= end_outer.get(key, -1.0)     # not inside another matmul/conv call
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
                dt = kernel_dtype(str(k.get("name", "")))
                if dt:
                    by_dt[dt] = by_dt.get(dt, 0.0) + d
            i += 1
        r = rows.setdefault(name, {"name": name, "calls": 0, "flop": 0.0, "us": 0.0, "by_dt": {}, "outer": False})
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
        out.append({"name": r["name"], "calls": r["calls"], "gflop": round(r["flop"] / 1e9, 3),
                    "device_ms": round(r["us"] / 1000.0, 3), "tflops": round(tf, 2), "dtype": dt,
                    "peak_tflops": peak, "peak_pct": round(100.0 * tf / peak, 1) if peak else None,
                    "device": device, "outer": r["outer"]})
    return sorted(out, key=lambda r: -r["device_ms"])


def throughput_advice(rows: list[dict]) -> list[str]:
    """One line per operator whose throughput names a fix: an FP32 matrix product (FFMA/SIMT kernels) on a device
    with TF32 tensor cores, where TF32's peak is several times FP32's: ``torch.set_float32_matmul_precision("high")``
    (notebook 04's precision matrix). The figures are the measured TFLOP/s and the data sheet's peaks."""
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
        out.append(f"{r['name']}: {r['tflops']:.1f} TFLOP/s in FP32{of_fp32}, {100 * r['tflops'] / tf32:.0f}% of "
                   f"the {model}'s TF32 peak ({tf32:g}): torch.set_float32_matmul_precision(\"high\") runs it on "
                   f"TF32 tensor cores (04_torch_compile: the precision matrix)")
    return out
