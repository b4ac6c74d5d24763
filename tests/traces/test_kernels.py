"""perf_doctor.kernels: kernel names read (short names for tables, tensor cores from the name), on names of
the libraries' conventions beyond those in the H100 reference (``tests/replay/test_traces_views.py`` has those)."""
import pytest

from perf_doctor.kernels import looks_like_signature, short_name, tensor_core_label, uses_tensor_cores


@pytest.mark.parametrize("name, expected", [
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", True),
    ("volta_h884gemm_64x64_ldg8_nn", True),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", True),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
     "__5x_cublas", True),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<2>>>>(Params)", True),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", True),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4, false, false, cutlass::half_t>>(Params)", True),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
     "kernel__5x_cublas", False),
    ("volta_sgemm_128x64_nn", False),
    ("void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false>(params)", False),
    ("void dgemm_largek<double>(double*)", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
     "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", False),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<float, float>(long)", False),
    ("triton_poi_fused_add_relu_0", False),
    ("triton_tem_fused_mm_0", None),
])
def test_tensor_cores_from_names(name, expected):
    assert uses_tensor_cores(name) is expected


def test_labels_for_tables():
    assert [tensor_core_label(v) for v in (True, False, None)] == ["yes", "no", "unknown"]


def test_short_name_is_idempotent_and_bounded():
    names = ["void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
             "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)"
             "#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, float, 4, 4>)",
             "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1"
             "_g1_execute_segment_k_off_kernel__5x_cudnn", "a" * 300, "<built-in method conv2d of type object>",
             "autograd::engine::evaluate_function: GatherBackward0"]
    assert short_name(names[0]) == "at::native::reduce_kernel<sum_functor>"
    assert "tf32" in short_name(names[1])
    for n in names:
        for w in (12, 30, 60, 200):
            s = short_name(n, w)
            assert len(s) <= w and short_name(s, w) == s, (n, w, s)
    assert looks_like_signature(names[0]) and not looks_like_signature("aten::addmm")


# ---- data types, peaks, throughput ---------------------------------------------------------------------------------
from pathlib import Path  # noqa: E402

from perf_doctor.diagnosis import is_fp32_gemm  # noqa: E402
from perf_doctor.kernels import kernel_dtype  # noqa: E402
from perf_doctor.throughput import (PEAK_TFLOPS, device_model, op_flops, op_throughput, peak_tflops,  # noqa: E402
                                       throughput_advice)
from tests.fake_trace import doc, kernel, op, runtime, step  # noqa: E402

FP32_FFMA = ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_"
             "kernel__5x_cublas")


@pytest.mark.parametrize("name, dtype", [
    (FP32_FFMA, "fp32"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nt_align1>(cutlass_80_simt_sgemm_256x128_8x4)", "fp32"),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x64x32_warpgroupsize1x1x1_g1_execute"
     "_segment_k_off_kernel__5x_cudnn", "tf32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(Params)", "tf32"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "bf16"),
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "fp16"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("ampere_int8_i8816gemm_int8_128x128_ldg16_nt", "int8"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4, false, false, cutlass::half_t>>(Params)", "fp16"),
    # AMD (MI300X): Tensile / hipBLASLt type letters, rocBLAS, MIOpen, Composable Kernel
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", "fp16"),
    ("Cijk_Ailk_Bljk_BBS_BH_Bias_HAS_SAV_UserArgs_MT16x16x256_MI16x16x1_SN_LDSB1", "bf16"),
    ("Cijk_Alik_Bljk_SSS_BH_MT64x64x16_SN", "fp32"),
    ("Cijk_Ailk_Bljk_I8II_BH_MT64x64x64", "int8"),
    ("rocblas_sgemm_kernel", "fp32"),
    ("igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2", "bf16"),
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_28GridwiseGemm_xdl_"
     "cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorES7_ttfttNS0_12element_wise11PassThroughE", "bf16"),
    # not a matrix kernel, or a name that does not say
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)", None),
    ("SubTensorOpWithScalar1d", None),
    ("triton_tem_fused_mm_0", None),
])
def test_data_type_from_kernel_names(name, dtype):
    assert kernel_dtype(name) == dtype


def test_amd_matrix_kernels_are_tensor_core_and_helpers_are_not():
    assert uses_tensor_cores("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3"
                             "INS_28GridwiseGemm_xdl_cshuffle_v3I") is True
    assert uses_tensor_cores("SubTensorOpWithCastTensor1d") is False
    # diagnosis' TF32 advice uses this classifier: one list of names
    assert is_fp32_gemm(FP32_FFMA) and not is_fp32_gemm("Cijk_Ailk_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1")


def test_peak_table_by_device_name():
    assert device_model("NVIDIA H100 80GB HBM3") == "H100" and device_model("NVIDIA H100 PCIe") is None
    assert device_model("AMD Instinct MI300X") == "MI300X" and device_model("NVIDIA A100-PG509-200") == "A100"
    assert device_model("NVIDIA L4") == "L4" and device_model("NVIDIA L40S") is None
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == 67.0 and peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None
    for model, peaks in PEAK_TFLOPS.items():   # dense tensor peaks above the FP32 ones
        assert all(peaks[t] > peaks["fp32"] for t in ("tf32", "fp16", "bf16") if t in peaks), model


def test_flops_from_recorded_shapes():
    assert op_flops("aten::mm", [[64, 32], [32, 16]]) == 2 * 64 * 32 * 16
    assert op_flops("aten::addmm", [[16], [64, 32], [32, 16], [], []]) == 2 * 64 * 32 * 16
    assert op_flops("aten::bmm", [[4, 64, 32], [4, 32, 16]]) == 4 * 2 * 64 * 32 * 16
    assert op_flops("aten::linear", [[8, 64, 32], [16, 32], [16]]) == 2 * 8 * 64 * 32 * 16
    assert op_flops("aten::relu", [[8, 8]]) is None and op_flops("aten::mm", [[8], "x"]) is None


def _fp32_mm_trace(dur_us: float) -> dict:
    """An 8192² FP32 product (FFMA kernel) on an H100 with its shapes recorded (record_shapes=True)."""
    return doc(step(1, 0, dur_us + 100),
               op("aten::mm", 5, dur_us + 50, **{"Input Dims": [[8192, 8192], [8192, 8192]],
                                                 "Input type": ["float", "float"]}),
               runtime("cudaLaunchKernel", 10, 5, corr=1), kernel(FP32_FFMA, 20, dur_us, corr=1),
               deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])


def test_fp32_product_at_52_tflops_gets_the_tf32_advice():
    # the H100 reference records no shapes (record_shapes=False), so the figure of notebook 05's compute plant
    # (~52 TFLOP/s) is planted in a synthetic trace
    flop = 2 * 8192 ** 3
    [row] = op_throughput(_fp32_mm_trace(flop / 52e12 * 1e6))
    assert row["dtype"] == "fp32" and row["tflops"] == pytest.approx(52.0, abs=0.05)
    assert row["peak_tflops"] == 67.0 and row["peak_pct"] == pytest.approx(77.6, abs=0.2)
    [advice] = throughput_advice([row])
    assert "set_float32_matmul_precision" in advice and "494.7" in advice and "11%" in advice


def test_throughput_on_the_mi300x_trace():
    path = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "tracelens_mi300_resnet_act_checkpoint.json.gz"
    if not path.exists():
        pytest.skip(f"{path} is absent (others' data, not shipped: see the project's README on ../shared)")
    from perf_doctor.load import load_trace

    rows = {r["name"]: r for r in op_throughput(load_trace(path))}
    conv = rows["aten::conv2d"]
    assert conv["outer"] and conv["dtype"] == "bf16" and conv["peak_tflops"] == 1307.4
    assert 0 < conv["tflops"] < conv["peak_tflops"] and rows["aten::miopen_convolution"]["gflop"] == conv["gflop"]
    assert rows["aten::linear"]["dtype"] == "bf16" and not throughput_advice(list(rows.values()))
