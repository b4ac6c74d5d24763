"""Kernel names, read: a short readable name for tables (``short_name``), whether a kernel runs on tensor cores
(``uses_tensor_cores``) and its data type (``kernel_dtype``). Why our own classifier: torch-tb-profiler's substring
list is wrong both ways on an H100 trace: it marks cuBLAS's ``sm80_xmma_gemm_f32f32_f32f32_f32_…_ffma_…`` (FP32 on
the CUDA cores) as tensor-core, and cuDNN's ``sm90_xmma_fprop_implicit_gemm_…tf32…`` as not. The rules follow the
naming conventions of NVIDIA's libraries (and AMD's Tensile):

- an instruction that only tensor cores run is named: ``hmma``/``gmma``/``wgmma``/``imma``/``dmma``/``wmma``,
  ``tensorop`` (CUTLASS's ``OpClassTensorOp``), cuDNN's ``tensor16x8x8``, the MMA shapes of cuBLAS/cuDNN/CUTLASS
  kernels (``s16816``, ``h1688``, ``h884``, ``s1688`` ...), CuTe's MMA atoms (``SM80_16x8x8_…``), AMD's ``MFMA``
  -> True;
- a CUDA-core kernel is named: ``ffma``/``hfma``/``dfma``, ``sgemm``/``dgemm``/``hgemm``, ``simt``, ``gemv``,
  cuBLAS's small-N ``gemmSN``, cuDNN's ``scudnn`` and its legacy engines (``wgrad_alg0_engine``,
  ``implicit_convolve_sgemm``, FFT, Winograd) -> False;
- a kernel that is not a GEMM, convolution or attention (element-wise, reduction, normalisation, copies, the
  libraries' own helpers: split-K reductions, epilogues, layout transposes, workspace initialisation) -> False;
- a GEMM/convolution kernel whose data type only tensor cores take at speed (``tf32``, ``bf16``, ``f16``, FP8,
  INT8) -> True; PyTorch's memory-efficient attention (``fmha_cutlass…_sm80`` and later: CUTLASS's TensorOp with
  3xTF32 for float32) and FlashAttention -> True;
- any other GEMM-like kernel (e.g. a Triton matmul template, whose precision its name does not say) -> None.
"""

from __future__ import annotations

import re
from functools import lru_cache

ELLIPSIS = "…"

_ANON = re.compile(r"\(anonymous namespace\)::")
_RETURN_TYPE = re.compile(
    r"^(?:(?:void|static|__global__|inline|unsigned|signed|const|int|float|double|bool|long|"
    r"char|short|auto)\s+)+"
)
_CPP_HEAD = re.compile(r"[A-Za-z_~][\w:~]*")
# the parts of a cuBLAS/cuDNN xmma name that only tune it (stages, warps, alignment, how it is launched)
_XMMA_NOISE = [
    (re.compile(r"_stage\d+"), ""),
    (re.compile(r"_warp(?:group)?size\d+x\d+x\d+"), ""),
    (re.compile(r"_align[a-z]\d+"), ""),
    (re.compile(r"_tilesize(\d+x\d+x\d+)"), r"_\1"),
    (re.compile(r"_execute(?:_segment_k_o(?:n|ff)|_split_k)?_kernel"), ""),
    (re.compile(r"_strided_execute_kernel"), "_strided"),
    (re.compile(r"__5x_"), "_"),
    (re.compile(r"_implicit_gemm"), ""),
    (re.compile(r"_g1(?=_)"), ""),
    (
        re.compile(r"_(nchw|nhwc)(?:kcrs|krsc)_(nchw|nhwc)"),
        lambda m: f"_{m.group(1)}" if m.group(1) == m.group(2) else f"_{m.group(1)}_{m.group(2)}",
    ),
]
# a template argument worth showing beside a generic kernel (PyTorch's element-wise and reduction kernels are told
# apart only by their functor or the function whose lambda they run)
_HINT = re.compile(r"functor|ops\b|impl\b|_cuda\b|_kernel\b", re.IGNORECASE)
_NOT_HINT = {
    "BinaryFunctor",
    "BUnaryFunctor",
    "AUnaryFunctor",
    "UnaryFunctor",
    "gpu_kernel_impl",
    "gpu_kernel_impl_nocast",
    "func_wrapper_t",
    "ReduceOp",
    "OpaqueType",
    "TensorListMetadata",
    "_cuda_scatter_gather_internal_kernel",
    "CUDAGeneratorImpl",
}
_PLAIN_TYPES = {
    "float",
    "double",
    "half",
    "bool",
    "int",
    "long",
    "short",
    "char",
    "unsigned",
    "signed",
    "void",
    "float2",
    "float4",
    "BFloat16",
    "Half",
}
_WRAPPERS = {
    "Kernel",
    "Kernel2",
    "device_kernel",
    "kernel",
}  # CUTLASS's kernel entry points: the name is inside
_ALREADY_SHORT = re.compile(r"[\w:.\-]+(?:<[\w:]*>?)?" + ELLIPSIS + "?")


def _match(s: str, i: int) -> int:
    """The index of the bracket closing the one at ``s[i]`` (``<>`` and ``()`` both nest), or len(s)."""
    depth = 0
    for j in range(i, len(s)):
        c = s[j]
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
            if depth == 0:
                return j
    return len(s)


def _split_top(s: str) -> list[str]:
    """``s`` split at the commas outside any bracket."""
    out, depth, cur = [], 0, []
    for c in s:
        if c in "<({":
            depth += 1
        elif c in ">)}":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    out.append("".join(cur).strip())
    return [p for p in out if p]


def _hint(targs: str) -> str | None:
    """The template argument that tells a generic kernel apart: a functor/op/implementation, or a lambda's function."""
    for m in re.finditer(r"([A-Za-z_]\w*)\s*([(<]?)", targs):
        word, after = m.group(1), m.group(2)
        if word in _NOT_HINT or word in (
            "std",
            "at",
            "native",
            "c10",
            "cuda",
            "detail",
            "lambda",
            "operator",
        ):
            continue
        if _HINT.search(word) or after == "(":
            return word
    parts = _split_top(targs)
    if len(parts) == 1 and re.fullmatch(r"[A-Za-z_]\w*", parts[0]) and parts[0] not in _PLAIN_TYPES:
        return parts[0]
    return None


@lru_cache(maxsize=4096)
def _parse(name: str) -> tuple[str, str, str]:
    """``(core, hint, targs)``: the kernel's own name (no return type, template arguments, arguments or xmma tuning
    parts; CUTLASS's wrapped kernel's), the template argument worth showing beside it, and the template arguments."""
    s = _ANON.sub("", str(name).strip())
    s = _RETURN_TYPE.sub("", s)
    core, hint, targs = s, "", ""
    m = _CPP_HEAD.match(s)
    if m and m.end() < len(s) and s[m.end()] in "<(":
        head, rest = m.group(0), s[m.end() :]
        if rest[0] == "<":
            end = _match(rest, 0)
            targs = rest[1:end]
            after = rest[end + 1 :].lstrip()
            if after and after[0] not in "(:" and not after.startswith("::"):
                head = None  # not a C++ signature (e.g. "a<b c")
        if head is not None:
            core = head
            last = head.rsplit("::", 1)[-1]
            first = _split_top(targs)[0] if targs else ""
            inner = _CPP_HEAD.match(first)
            if last in _WRAPPERS and inner:
                core = inner.group(0).rsplit("::", 1)[-1]
            elif targs:
                hint = _hint(targs) or ""
    if re.match(r"sm\d+_xmma", core):
        for pat, rep in _XMMA_NOISE:
            core = pat.sub(rep, core)
    return core, hint, targs


_SIGNATURE = re.compile(
    r"^(?:void\s+)?[A-Za-z_][\w:]*(?:<.*>)?\(.*\)$|^void\s|\(anonymous namespace\)"
)


def looks_like_signature(name: str) -> bool:
    """True for a C++ signature (``void ns::kernel<...>(...)``), which ``short_name`` shortens even where it fits."""
    return bool(_SIGNATURE.search(str(name)))


def short_name(name: str, width: int = 60) -> str:
    """A kernel's or operator's name as a table shows it (``_parse``: ``void ns::bn_kernel<float>(...)`` ->
    ``ns::bn_kernel``; ``elementwise_kernel<CUDAFunctor_add>``), cut to ``width`` with '…'. Stable and idempotent."""
    name = str(name)
    width = max(int(width), 2)
    if len(name) <= width and _ALREADY_SHORT.fullmatch(name):
        return name
    core, hint, _ = _parse(name)
    out = " ".join((f"{core}<{hint}>" if hint else core).split())
    return out if len(out) <= width else out[: width - 1] + ELLIPSIS


_TC_INSTRUCTION = re.compile(
    r"hmma|gmma|imma|qmma|dmma|wmma|mfma|xdlops|_xdl_|tensorop|tensor\d+x\d+x\d+"
    r"|[a-z](?:16816|1688|884|8816|16832|16864)(?=[a-z_])"
    r"|sm[789]\d_\d+x\d+x\d+_|_mi\d+x\d+x\d+"
)
_CUDA_CORE = re.compile(
    r"ffma|hfma|dfma|sgemm|dgemm|hgemm|cgemm|zgemm|simt|gemv|gemmsn|gemmk1|scudnn|dcudnn"
    r"|_alg\d_engine|convolve_|fft|winograd"
)
_LIBRARY_HELPER = re.compile(
    r"init_device_workspace|splitkreduce|epilogue|nchwtonhwc|nhwctonchw|transpose"
    r"|scal_kernel|reduce_kernel|computeoffsets|convert|subtensorop"
)
_GEMM_LIKE = re.compile(
    r"gemm|conv|fprop|dgrad|wgrad|matmul|(?:^|_)b?mm(?:_|$)|fmha|flash|attention|sdpa|nvjet"
    r"|triton_tem|xmma|cijk_"
)
_TC_DTYPE = re.compile(r"tf32|bf16|fp16|half|e4m3|e5m2|fp8|int8|(?:^|_)(?:f16|i8|s8|u8)")
_NVJET_TC = re.compile(r"^nvjet_[a-z]*[hbtqe][a-z]*_")
_FMHA_SM80 = re.compile(r"fmha_cutlass.*_sm(?:8\d|9\d|1\d\d)")


@lru_cache(maxsize=4096)
def uses_tensor_cores(name: str) -> bool | None:
    """Whether kernel ``name`` runs on tensor cores (the module docstring's rules); None: the name does not say."""
    whole = str(name).lower()
    core = _parse(str(name))[0].lower()
    if _LIBRARY_HELPER.search(core):
        return False
    if _TC_INSTRUCTION.search(whole):
        return True
    if _CUDA_CORE.search(core):
        return False
    if not _GEMM_LIKE.search(core):
        return False
    if (
        _TC_DTYPE.search(core)
        or _NVJET_TC.search(core)
        or _FMHA_SM80.search(core)
        or "flash" in core
    ):
        return True
    return None


def tensor_core_label(value: bool | None) -> str:
    """The classifier's answer as a table shows it: "yes", "no", or "unknown" (a GEMM whose name does not say)."""
    return "unknown" if value is None else ("yes" if value else "no")


DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8")
_CUTLASS_T = [
    ("tfloat32_t", "tf32"),
    ("bfloat16_t", "bf16"),
    ("half_t", "fp16"),
    ("float_e4m3_t", "fp8"),
    ("float_e5m2_t", "fp8"),
    ("int8_t", "int8"),
]
_NAME_T = [
    (re.compile(r"e4m3|e5m2|fp8|(?:^|_)f8(?:_|f8|b8|$)"), "fp8"),
    (re.compile(r"int8|(?:^|_)[isu]8(?:_|$)|imma"), "int8"),
    (re.compile(r"tf32|xf32"), "tf32"),
    (re.compile(r"bf16|bfloat16"), "bf16"),
    (re.compile(r"fp16|f16|half|hmma|h884|h1688|hgemm|hfma"), "fp16"),
    (re.compile(r"f64|fp64|dgemm|dfma|dmma|double"), "fp64"),
    (re.compile(r"f32|fp32|sgemm|ffma|simt"), "fp32"),
]
_TENSILE = re.compile(
    r"cijk_a[a-z]+_b[a-z]+_([a-z0-9]+?)_"
)  # Tensile/hipBLASLt: Cijk_Ailk_Bljk_HHS_BH_MT...
_TENSILE_T = {"h": "fp16", "b": "bf16", "s": "fp32", "d": "fp64", "x": "tf32"}
_NVJET_T = {
    "h": "fp16",
    "b": "bf16",
    "t": "tf32",
    "s": "fp32",
    "q": "fp8",
    "e": "fp8",
    "i": "int8",
    "d": "fp64",
}


@lru_cache(maxsize=4096)
def kernel_dtype(name: str) -> str | None:
    """The data type a matrix kernel (GEMM, convolution, attention) computes in, from its name: one of ``DTYPES``, or
    None (not a matrix kernel, or a name that does not say). NVIDIA: xmma's math type (``f32f32_tf32f32_f32`` tf32,
    ``…ffma`` fp32), ``ampere_bf16_s16816gemm`` / ``volta_h884gemm`` / ``sgemm``, nvjet's letters (``nvjet_hsh`` fp16,
    ``nvjet_tst`` tf32, ``nvjet_qqb`` fp8), CUTLASS's types. AMD: Tensile/hipBLASLt's letters (``Cijk_Ailk_Bljk_HHS_``
    fp16, ``_BBS_`` bf16, ``_SSS_`` fp32, ``I8II``, ``F8``), rocBLAS, MIOpen's ``igemm_…_bf16_``, Composable Kernel's
    mangled types (``t`` = ck::bhalf_t, ``DF16_`` = half, ``f`` = float)."""
    raw = str(name)
    whole = raw.lower()
    core = _parse(raw)[0].lower()
    tc = uses_tensor_cores(raw)
    if (
        tc is False
        and not (_GEMM_LIKE.search(core) or "gemm" in whole)
        or _LIBRARY_HELPER.search(core)
    ):
        return None
    if m := _TENSILE.search(whole):
        tok = m.group(1)
        if tok.startswith(("i8", "4xi8")):
            return "int8"
        if tok.startswith(("f8", "b8")):
            return "fp8"
        if "xf32" in whole and tok[0] == "s":
            return "tf32"
        return _TENSILE_T.get(tok[0])
    if m := re.match(r"nvjet_([a-z])", core):
        return _NVJET_T.get(m.group(1))
    if raw.startswith(
        "_ZN2ck"
    ):  # Composable Kernel: the first run of mangled scalar types after the GEMM's name
        if "DF16_" in raw:
            return "fp16"
        if m := re.search(r"(?:E|I|_)([tfhdaDF8_]{3,})(?:L|N|E|S)", raw):
            t = m.group(1)
            return "bf16" if t.startswith("t") else "fp32" if t.startswith("f") else None
        return None
    m = re.search(
        r"tensorop_([shdi])(1688|16816|884|8816|16832)", whole
    )  # CUTLASS: the MMA's accumulator and shape
    if m and not any(pat.search(core) for pat, _ in _NAME_T[:5]):
        return {"d": "fp64", "i": "int8", "h": "fp16"}.get(m.group(1)) or (
            "tf32" if m.group(2) == "1688" else None
        )
    for t, dt in _CUTLASS_T:
        if "cutlass::" + t in raw or "cute::" + t in raw:
            return dt
    # xmma: the types before the tile shape; the math type is the second pair (f32f32_tf32f32 -> tf32)
    m = re.search(
        r"xmma_[a-z_]*?(?:gemm|fprop|dgrad|wgrad)[a-z_]*?_([a-z0-9]+)_([a-z0-9]+)_", whole
    )
    if m and re.fullmatch(r"(?:[a-z]+\d+){2}", m.group(2)):
        for pat, dt in _NAME_T:
            if pat.search("_" + m.group(2) + "_"):
                return dt
    for pat, dt in _NAME_T:
        if pat.search(core):
            return dt
    return None


# Kineto writes "est. achieved occupancy %" 0 where its occupancy calculator has no estimate (CUTLASS and xmma kernels
# with large dynamic shared memory: 12 warps per SM and "0%"): a kernel that ran had warps resident, so 0 is read as
# not recorded (None: unknown), never as 0%. ROCm traces record neither figure.
OCCUPANCY_ARG = "est. achieved occupancy %"
BLOCKS_ARG = "blocks per SM"


def _recorded(rows: list[tuple[float, float | None]]) -> float | None:
    """The duration-weighted mean of the recorded (positive, finite) values; None when none was recorded."""
    got = [(d, v) for d, v in rows if isinstance(v, (int, float)) and v > 0 and v == v and d > 0]
    return round(sum(d * v for d, v in got) / sum(d for d, _ in got), 3) if got else None


def kernel_rows(kernels: list, steps: int = 1, graph_ids=(), top: int | None = None) -> list[dict]:
    """One row per kernel name of ``kernels`` (complete kernel events), by total time: ``{"name", "short_name",
    "calls", "total_ms", "ms_per_step", "mean_us", "max_us", "min_us", "blocks_per_sm", "occupancy_pct"`` (None: not
    recorded), ``"tensor_cores"`` (yes, no, unknown), ``"dtype"`` (or None), ``"triton"``, ``"in_graph"}`` (under
    a graph replay: ``graph_ids``, the replays' correlation ids)."""
    by: dict[str, list] = {}
    for e in kernels:
        by.setdefault(str(e.get("name", "")), []).append(e)
    rows = []
    for name, es in by.items():
        durs = [float(e.get("dur", 0) or 0) for e in es]
        args = [e.get("args") if isinstance(e.get("args"), dict) else {} for e in es]
        total = sum(durs)
        rows.append(
            {
                "name": name,
                "short_name": short_name(name),
                "calls": len(es),
                "total_ms": round(total / 1000.0, 4),
                "ms_per_step": round(total / 1000.0 / max(steps, 1), 4),
                "mean_us": round(total / len(es), 3),
                "max_us": round(max(durs), 3),
                "min_us": round(min(durs), 3),
                "blocks_per_sm": _recorded([(d, a.get(BLOCKS_ARG)) for d, a in zip(durs, args)]),
                "occupancy_pct": _recorded([(d, a.get(OCCUPANCY_ARG)) for d, a in zip(durs, args)]),
                "tensor_cores": tensor_core_label(uses_tensor_cores(name)),
                "dtype": kernel_dtype(name),
                "triton": name.lower().startswith("triton"),
                "in_graph": any(a.get("correlation") in graph_ids for a in args),
            }
        )
    rows.sort(key=lambda r: -r["total_ms"])
    return rows[:top] if top is not None else rows
