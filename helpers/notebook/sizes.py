"""Every notebook's sizes at each scale, in one place (``env.params`` picks the row): ``smoke``, a 2-core CPU in
about 2 minutes per notebook (CI); ``full``, the source articles' sizes on a GPU. Each size is written as its
``(smoke, full)`` pair; why each is what it is: docs/sizes.md and docs/lessons/."""


def by_scale(**pairs: tuple) -> dict[str, dict]:
    """``{"smoke": {...}, "full": {...}}`` from ``name=(smoke value, full value)`` pairs."""
    return {scale: {k: v[i] for k, v in pairs.items()} for i, scale in enumerate(("smoke", "full"))}


# 01_profiler_basics: why these sizes, and the time guard measured on the H100: docs/lessons/01_profiler_basics.md
PROFILER_BASICS = by_scale(
    batch_size=(8, 256),
    image_size=(32, 224),
    width=(16, 64),
    blocks=(3, 4),
    steps=(10, 30),
    warmup=(5, 10),
    wait=(1, 1),
    warmup_steps=(1, 3),
    active=(8, 5),
    rounds=(20, 4),
    round_steps=(5, 5),
    cpu_threads=(1, None),
    matmul_size=(256, 8192),
    matmul_repeats=(20, 50),
    timer_rounds=(5, 5),
    budget_s=(None, 70),
    reserve_s=(0, 10),
)

# 02_data_pipeline: what each size is for, and the full scale measured on the H100: docs/sizes.md
DATA_PIPELINE = by_scale(
    crop=(256, 256),
    batch_size=(8, 128),
    dataset_size=(128, 10_000),
    num_workers=(4, 4),
    steps=(12, 16),
    warmup=(1, 1),
    cycles=(3, 2),
    rounds=(5, 2),
    ceiling_steps=(10, 30),
    sweep_steps=(12, 2),
    pipe_steps=(15, 2),
    profile_steps=(3, 2),
    profile_cycles=(4, 1),
    profile_rounds=(3, 1),
    dilation_repeats=(20, 100),
    decode_repeats=(10, 50),
    mask_ratio=(0.25, 0.25),
    stand_in_ms=(None, 100),
    stand_in_ratio=(0.35, 0.35),
    sweep_workers=([0, 1, 2, 4, 8, 16, 32], [4, 8, 16]),
    pipe_warmup=(1, 0),
    budget_s=(600, 180),
    reserve_s=(30, 25),
)

# 03_backward_hooks: the rounds and the full scale's time guard, measured: docs/sizes.md
BACKWARD_HOOKS = by_scale(
    batch_size=(8, 128),
    image_size=(64, 224),
    patch_size=(16, 16),
    depth=(2, 12),
    width=(192, 768),
    heads=(3, 12),
    steps=(6, 12),
    warmup=(2, 4),
    rounds=(48, 16),
    wait=(1, 1),
    warmup_steps=(1, 3),
    active=(2, 3),
    budget_s=(None, 115),
    reserve_s=(0, 15),
)

# 04_torch_compile: why these sizes, what each measured and the time guard: docs/lessons/04_torch_compile.md
TORCH_COMPILE = by_scale(
    cells=(
        [("gated_mlp", "fp32", "eager"), ("gated_mlp", "fp32", "default")],
        [
            ("swin_t", "fp16", "eager"),
            ("swin_t", "fp16", "default"),
            ("swin_t", "fp16", "reduce-overhead"),
        ],
    ),
    image_size=(8, 224),
    batch_size=(256, 64),
    hidden=(512, 512),
    compile_steps=(2, 3),
    steps=(8, 20),
    n_batches=(4, 4),
    mlp_image_size=(8, 64),
    mlp_hidden=(64, 4096),
    mlp_batch_size=(16, 256),
    mlp_steps=(10, 30),
    mlp_rounds=(120, 30),
    interleave_rounds=(30, 20),
    explain_models=(["swin_mini", "convnext_mini"], ["swin_t", "convnext_large"]),
    explain_image_size=(64, 224),
    start_cell=(
        {"image_size": 8, "hidden": 16, "batch_size": 4, "compile_steps": 2},
        {"image_size": 64, "hidden": 4096, "batch_size": 256, "compile_steps": 3},
    ),
    profile=(("gated_mlp", "fp32"), ("swin_t", "fp16")),
    lever=(("gated_mlp", "fp32"), ("gated_mlp", "fp32")),
    lever_rounds=(120, 20),
    cpu_threads=(1, None),
    budget_s=(None, 220),
    reserve_s=(0, 15),
    later_s=(None, 80),
)

# 05_diagnose: the plants' sizes and the full scale measured on the H100: docs/sizes.md
DIAGNOSE = by_scale(
    batch_size=(8, 64),
    features=(64, 1024),
    hidden=(64, 4096),
    input_ms=(2.0, 1.0),
    tiny_ops=(2000, 3000),
    matmul=(768, 8192),
    sync_ms=(20.0, 20.0),
    wait=(1, 2),
    warmup_steps=(1, 3),
    active=(3, 5),
    rounds=(12, 16),
    timing_warmup=(2, 3),
    mix_input_ms=(1.0, 0.25),
    mix_matmul=(384, 5632),
    mix_host_ms=(6.0, 20.0),
    budget_s=(None, 60),
    reserve_s=(0, 8),
)

# 06_distributed: the ranks, the straggler and the time guard: docs/sizes.md
DISTRIBUTED = by_scale(
    ranks=(2, None),
    threads=(1, None),
    batch_size=(2048, 512),
    features=(256, 4096),
    hidden=(512, 4096),
    layers=(3, 4),
    classes=(10, 1000),
    micro_batch=(8, 32),
    accum=(8, 4),
    rounds=(30, 12),
    warmup=(2, 3),
    bucket_caps=([0.25, 25.0], [1.0, 25.0]),
    bucket_cap_mb=(25.0, 25.0),
    straggler_rank=(0, 1),
    straggler_ms=(0.0, 0.0),
    straggler_share=(0.2, 0.18),
    straggler_steps=(10, 9),
    wait=(1, 1),
    warmup_steps=(1, 1),
    active=(3, 3),
    n_batches=(4, 4),
    timeout_s=(240, 40),
    budget_s=(None, 50),
    reserve_s=(0, 10),
)

# 07_memory: what each size is for, and its timings, in docs/lessons/07_memory.md
MEMORY = by_scale(
    width=(64, 1024),
    hidden=(1024, 4096),
    blocks=(4, 8),
    image_size=(8, 64),
    batch_size=(128, 512),
    micro_batches=(2, 4),
    rounds=(30, 10),
    cpu_threads=(1, None),
    swin_batch=(64, 64),
    search_high=(4096, 524288),
    budget_s=(None, 90),
    reserve_s=(0, 10),
)
