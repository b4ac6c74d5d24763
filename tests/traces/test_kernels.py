"""helpers.traces.kernels: kernel names read (short names for tables, tensor cores from the name), on names of
the libraries' conventions beyond those in the H100 reference (``tests/replay/test_traces_views.py`` has those)."""
import pytest

from helpers.traces.kernels import looks_like_signature, short_name, tensor_core_label, uses_tensor_cores


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
