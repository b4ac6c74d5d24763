"""Every notebook's sizes at each scale, in one place (``env.params`` picks the row).

``smoke``: a 2-core CPU in about 2 minutes per notebook (CI). ``full``: the source
articles' sizes on a GPU.
"""

PROFILER_BASICS = {
    "smoke": dict(batch_size=32, image_size=32, width=16, blocks=3, steps=10, warmup=5,
                  wait=1, warmup_steps=1, active=3, matmul_size=256, matmul_repeats=20),
    "full": dict(batch_size=256, image_size=224, width=64, blocks=4, steps=30, warmup=10,
                 wait=1, warmup_steps=3, active=5, matmul_size=8192, matmul_repeats=50),
}

DATA_PIPELINE = {
    # crop: RandomCrop size = model input (power of two); dataset_size: paths (all to the sample JPEGs)
    "smoke": dict(crop=64, batch_size=8, dataset_size=128, num_workers=4, steps=4, warmup=2, ceiling_steps=8,
                  sweep_steps=3, pipe_steps=12, profile_steps=2, dilation_repeats=20, decode_repeats=10, mask_ratio=0.25),
    "full": dict(crop=256, batch_size=256, dataset_size=10_000, num_workers=4, steps=20, warmup=5, ceiling_steps=30,
                 sweep_steps=10, pipe_steps=10, profile_steps=3, dilation_repeats=100, decode_repeats=50, mask_ratio=0.25),
}

BACKWARD_HOOKS = {
    "smoke": dict(batch_size=8, image_size=64, patch_size=16, depth=2, width=192, heads=3, steps=6, warmup=2,
                  wait=1, warmup_steps=1, active=2),
    "full": dict(batch_size=128, image_size=224, patch_size=16, depth=12, width=768, heads=12, steps=20, warmup=5,
                 wait=1, warmup_steps=4, active=3),
}

TORCH_COMPILE = {
    # cells: (model, precision, mode) training runs, the most important first; an eager cell per (model, precision)
    # is the baseline. Full: six cold compiles (~5.5 min estimated on an H100) so the notebook fits 10 minutes.
    "smoke": dict(cells=[("vit_mini", "fp32", "eager"), ("vit_mini", "fp32", "default")],
                  image_size=64, batch_size=16, compile_steps=2, steps=8, n_batches=4,
                  mlp_image_size=32, mlp_hidden=256, mlp_batch_size=64, mlp_steps=10,
                  interleave_rounds=12, explain_models=["swin_mini", "convnext_mini"],
                  start_cell=dict(model_name="mlp_fixed", image_size=8, hidden=16, batch_size=4, steps=3,
                                  compile_steps=2, n_batches=2),
                  matrix_budget_s=900),
    "full": dict(cells=[("swin_b", "fp16", "eager"), ("swin_b", "fp16", "default"),      # the article's best cell
                        ("swin_t", "fp16", "eager"), ("swin_t", "fp16", "default"),      # the article's "slower" model
                        ("convnext_large", "fp16", "eager"), ("convnext_large", "fp16", "default"),
                        ("swin_t", "bf16", "eager"), ("swin_t", "bf16", "default"),      # bf16 beside fp16
                        ("swin_t", "fp32", "eager"), ("swin_t", "fp32", "default"),      # fp32 (TF32 setting recorded)
                        ("swin_t", "fp16", "reduce-overhead")],                          # CUDA graphs
                 image_size=224, batch_size=64, compile_steps=3, steps=20, n_batches=4,
                 mlp_image_size=64, mlp_hidden=4096, mlp_batch_size=256, mlp_steps=30,
                 interleave_rounds=0,  # GPU: sequential timing is stable; kept models would skew peak memory
                 explain_models=["swin_t", "convnext_large"],
                 start_cell=dict(model_name="mlp_fixed", image_size=64, hidden=4096, batch_size=256, steps=5,
                                 compile_steps=3, n_batches=2),
                 matrix_budget_s=420),
}
