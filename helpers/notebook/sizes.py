"""Every notebook's sizes at each scale, in one place (``env.params`` picks the row).

``smoke``: a 2-core CPU in about 2 minutes per notebook (CI). ``full``: the source
articles' sizes on a GPU.
"""

PROFILER_BASICS = {
    # docs/lessons/01_profiler_basics.md: why these sizes, and the time guard measured on the H100
    "smoke": dict(
        batch_size=8,
        image_size=32,
        width=16,
        blocks=3,
        steps=10,
        warmup=5,
        wait=1,
        warmup_steps=1,
        active=8,
        rounds=20,
        round_steps=5,
        cpu_threads=1,
        matmul_size=256,
        matmul_repeats=20,
        timer_rounds=5,
        budget_s=None,
        reserve_s=0,
    ),
    "full": dict(
        batch_size=256,
        image_size=224,
        width=64,
        blocks=4,
        steps=30,
        warmup=10,
        wait=1,
        warmup_steps=3,
        active=5,
        rounds=4,
        round_steps=5,
        cpu_threads=None,
        matmul_size=8192,
        matmul_repeats=50,
        timer_rounds=5,
        budget_s=70,
        reserve_s=10,
    ),
}

DATA_PIPELINE = {
    # crop: RandomCrop size = model input (power of two); dataset_size: paths (all to the sample JPEGs).
    # Timed rows cover at least `cycles` full worker cycles (steps rounded up); stand_in_ms: the fixed step of
    # the stand-in device used on a CPU (sleeps, no CPU), ignored where a GPU runs the real model; None sets it
    # once from a measurement: stand_in_ratio x the baseline's time per batch with num_workers workers (one process's
    # fastest batch / the workers: the notebook's calibration cell), so the baseline is input-bound on any core count.
    # num_workers: the article's 4, at most the cores but at least 2 (the notebook), so worker waves show on 2 cores.
    # rounds: interleaved rounds (each one loader run of `cycles` worker cycles) of the sweep, the variants and the
    # options; comparisons resample the rounds' cycle means (smoke: 5 rounds x 3 cycles = 15 per row).
    # pipe_steps: timed batches of the pipeline alone (T_batch; one process, no worker cycles), over all rounds.
    # sweep_workers: the num_workers sweep's points (those up to the cores, plus num_workers, twice it and the cores
    # up to the largest point: on the H100's 16 cores 4, 8, 16, the article's rule CPUs / GPUs).
    # profile_rounds x profile_cycles: the profiled windows with workers (the idle share), the variants in turns, each
    # window that many full worker cycles, the share pooled over the windows. Smoke 3 x 4: with one window of 2 cycles
    # the best pipeline's share was longer than the baseline's or within 0.01 of it in 2 of 8 runs (0.799 vs 0.777,
    # 0.663 vs 0.666): a wave loader waits once per cycle, so a short window's share depends on where in the wave it
    # starts, and a burst of other load can fall on one variant's window only. Measured here with a process busy 0.7 s
    # in every 1.2 s on one core: baseline minus best share 1 x 2: -0.07 to +0.25, below 0 in 2 of 8; 2 x 4: -0.05 to
    # +0.26, 1 of 8; 3 x 4: +0.06 to +0.15, 0 of 8 (~2.7 s for both variants on a quiet machine, against ~0.6 s).
    # Full: one window of one cycle.
    # pipe_warmup: warm-up batches of the pipeline-alone rows (full: 0; their first batch is no start-up burst).
    # budget_s / reserve_s: the notebook's time guard (helpers.notebook.budget; $PERF_TIME_BUDGET_S wins): once
    # budget_s - reserve_s are spent, what is left becomes skipped rows (said once, in one box); the bad-input rows
    # are never skipped. Smoke: generous, never reached in CI.
    # Full scale on one H100 (16 cores), MEASURED there (data/reference/h100/02_data_pipeline, batch 256, cut short at
    # 152.6 s of a 170 s guard before the fixes ran in the loop): set-up 6 s; the ceiling 64.8 ms a step; one 4-worker
    # baseline step 498.5 ms (680.5 ms in the sweep's rounds: 8 timed steps were too few); a 0-worker step 2.3-2.5 s
    # (2456.5 ms mean; the pipeline alone 2251.6 ms a batch); per sample (single-process profiles, ms): baseline 9.3
    # (decode 3.2, mask 4.3), crop_first 6.1, batch_collate 7.0, uint8_device 4.8; the dilation alone 3.63 ms
    # (convolve2d) against 0.07. Sized from those for a 180 s guard (25 s kept for the results, TensorBoard and the
    # trace views): batch 128 (a worker's batch ~0.6-1.4 s), 2 rounds of a warm-up cycle + 2 timed cycles. Each fix
    # is timed where the story introduces it, with the baseline and the step before it (issue 43): 13 model runs, 5
    # of the pipeline alone and 2 of the ceiling ~80 s (the earlier all-at-once order: ~45 s); the sweep at 4, 8, 16
    # workers (the cores; no 0-worker point: 2.4 s a step) ~30 s; the profiles, 2 batches each, ~13 s; the options
    # ~20 s; the idle share ~10 s; set-up, dilation, decode, bad inputs ~12 s: ~165 s against the 155 s the guard
    # leaves, so the guard may skip the last sections (an estimate from those measured costs, to be replaced by the
    # next full run's; docs/lessons/02_data_pipeline.md).
    "smoke": dict(
        crop=256,
        batch_size=8,
        dataset_size=128,
        num_workers=4,
        steps=12,
        warmup=1,
        cycles=3,
        rounds=5,
        ceiling_steps=10,
        sweep_steps=12,
        pipe_steps=15,
        profile_steps=3,
        profile_cycles=4,
        profile_rounds=3,
        dilation_repeats=20,
        decode_repeats=10,
        mask_ratio=0.25,
        stand_in_ms=None,
        stand_in_ratio=0.35,
        sweep_workers=[0, 1, 2, 4, 8, 16, 32],
        pipe_warmup=1,
        budget_s=600,
        reserve_s=30,
    ),
    "full": dict(
        crop=256,
        batch_size=128,
        dataset_size=10_000,
        num_workers=4,
        steps=16,
        warmup=1,
        cycles=2,
        rounds=2,
        ceiling_steps=30,
        sweep_steps=2,
        pipe_steps=2,
        profile_steps=2,
        profile_cycles=1,
        profile_rounds=1,
        dilation_repeats=100,
        decode_repeats=50,
        mask_ratio=0.25,
        stand_in_ms=100,
        stand_in_ratio=0.35,
        sweep_workers=[4, 8, 16],
        pipe_warmup=0,
        budget_s=180,
        reserve_s=25,
    ),
}

BACKWARD_HOOKS = {
    # rounds: interleaved rounds of the timed comparisons (one step of each variant per round). Smoke: 48 rounds of a
    # ~10 ms step, so that a comparison whose true difference is nil says "no difference" in ~97% of runs on a
    # shared 2-core machine (78 of 80 here; 12 rounds: 76 of 80). budget_s / reserve_s: the notebook's time guard
    # (helpers.notebook.budget; $PERF_TIME_BUDGET_S wins); smoke: none. Full, measured on the H100 reference run
    # (data/reference/h100/03_backward_hooks, commit 061c00a): 108.9 s wall (run.json) with 20 rounds and 20 timed
    # steps, of which ~10 s start-up and imports, 9.4 s the baseline (20 + 5 timed, 8 profiled steps; first step
    # 705 ms, then 169 ms a step), ~14 s the four matrix profiles (a 1.5-2 s model build + 8 steps each), 17.9 s the
    # matrix's interleaved rounds (4 x 25 steps), 12.3 s the labelling cost (2 builds + 2 x 25 steps), 16.7 s three
    # labelled-model cells issue 30 removed (so ~92 s for today's cells at those sizes). 16 rounds, 12 + 4 timed
    # steps, 7 profiled steps: ~7.5 s less, ~85 s in all, every row run inside budget_s - reserve_s = 100 s (GPU step
    # times vary little: the H100's step IQR was 0.1%, so 16 rounds still resolve its 2% effect).
    "smoke": dict(
        batch_size=8,
        image_size=64,
        patch_size=16,
        depth=2,
        width=192,
        heads=3,
        steps=6,
        warmup=2,
        rounds=48,
        wait=1,
        warmup_steps=1,
        active=2,
        budget_s=None,
        reserve_s=0,
    ),
    "full": dict(
        batch_size=128,
        image_size=224,
        patch_size=16,
        depth=12,
        width=768,
        heads=12,
        steps=12,
        warmup=4,
        rounds=16,
        wait=1,
        warmup_steps=3,
        active=3,
        budget_s=115,
        reserve_s=15,
    ),
}

TORCH_COMPILE = {
    # 04_torch_compile: why these sizes, what each measured and the time guard: docs/lessons/04_torch_compile.md
    "smoke": dict(
        cells=[("gated_mlp", "fp32", "eager"), ("gated_mlp", "fp32", "default")],
        image_size=8,
        batch_size=256,
        hidden=512,
        compile_steps=2,
        steps=8,
        n_batches=4,
        mlp_image_size=8,
        mlp_hidden=64,
        mlp_batch_size=16,
        mlp_steps=10,
        mlp_rounds=120,
        interleave_rounds=30,
        explain_models=["swin_mini", "convnext_mini"],
        explain_image_size=64,
        start_cell=dict(image_size=8, hidden=16, batch_size=4, compile_steps=2),
        profile=("gated_mlp", "fp32"),
        lever=("gated_mlp", "fp32"),
        lever_rounds=120,
        cpu_threads=1,
        budget_s=None,
        reserve_s=0,
        later_s=None,
    ),
    "full": dict(
        cells=[
            ("swin_t", "fp16", "eager"),
            ("swin_t", "fp16", "default"),  # the article's "slower" model
            ("swin_t", "fp16", "reduce-overhead"),
        ],  # CUDA graphs (Triton kernels
        # mostly the ones above)
        image_size=224,
        batch_size=64,
        hidden=512,
        compile_steps=3,
        steps=20,
        n_batches=4,
        mlp_image_size=64,
        mlp_hidden=4096,
        mlp_batch_size=256,
        mlp_steps=30,
        mlp_rounds=30,
        interleave_rounds=20,
        explain_models=["swin_t", "convnext_large"],
        explain_image_size=224,
        start_cell=dict(image_size=64, hidden=4096, batch_size=256, compile_steps=3),
        cpu_threads=None,
        profile=("swin_t", "fp16"),  # the matrix's model: its compile reads the FX-graph cache
        lever=("gated_mlp", "fp32"),
        lever_rounds=20,
        budget_s=220,
        reserve_s=15,
        later_s=80,
    ),
}

DIAGNOSE = {
    # planted bottlenecks (05's planted_step, in its cells): input_ms per sample, tiny_ops per forward, one
    # matmul x matmul product, sync_ms of host work after a per-step .item(); the MLP: batch_size x features
    # -> hidden -> 10; profiler schedule wait / warmup_steps / active; "measure again": each plant and its fix timed
    # without the profiler in `rounds` interleaved rounds after `timing_warmup` untimed calls (smoke: the plants cost
    # ~18, ~43 and ~58 ms against a 1.2 ms step here, so 12 rounds give intervals far from 1 in ~4 s). The mixed
    # plant: mix_input_ms per sample, a mix_matmul product and mix_host_ms of plain host work in one step, each about
    # a third of it (so that the doctor must split the step, not find one cause of 95%).
    # Full, measured on the H100 reference run (data/reference/h100/05_diagnose/run.json): 43.0 s for the whole
    # notebook; steps: nothing planted 1.3 ms, input (64 x 1 ms) 76.4 ms, 3,000 tiny ops 128.5 ms, the 8192² FP32
    # product 64.6 ms, host sync 84.9 ms (20 rounds of the six timed steps: ~8.5 s; 16 rounds now: ~7 s). The mixed
    # plant (~20-25 ms each of input: 64 x (0.25 + ~0.14) ms, a 5632² product: (5632/8192)³ x 64 ms = 21 ms, and host
    # work) adds ~6 s (a profile of 10 steps; 3 x 19 timed steps of ~65 ms): ~48 s in all. reserve_s: the appendix
    # (bad inputs, a profile without steps, the doctor's command) and the results after the guarded experiments.
    # budget_s / reserve_s: the time guard (helpers.notebook.budget; $PERF_TIME_BUDGET_S wins) around the profiled
    # cases and timed rounds; the appendix's bad inputs always run.
    "smoke": dict(
        batch_size=8,
        features=64,
        hidden=64,
        input_ms=2.0,
        tiny_ops=2000,
        matmul=768,
        sync_ms=20.0,
        wait=1,
        warmup_steps=1,
        active=3,
        rounds=12,
        timing_warmup=2,
        mix_input_ms=1.0,
        mix_matmul=384,
        mix_host_ms=6.0,
        budget_s=None,
        reserve_s=0,
    ),
    "full": dict(
        batch_size=64,
        features=1024,
        hidden=4096,
        input_ms=1.0,
        tiny_ops=3000,
        matmul=8192,
        sync_ms=20.0,
        wait=2,
        warmup_steps=3,
        active=5,
        rounds=16,
        timing_warmup=3,
        mix_input_ms=0.25,
        mix_matmul=5632,
        mix_host_ms=20.0,
        budget_s=60,
        reserve_s=8,
    ),
}

DISTRIBUTED = {
    # ranks: processes (gloo on a CPU, one intra-op thread each; NCCL with one GPU each, None: every GPU). batch_size:
    # the global batch (single process: all of it; DDP: batch_size / ranks per rank); micro_batch x accum: the
    # accumulation experiment's optimizer step (small micro-batches, so the all-reduce it saves stands out);
    # straggler_ms: the planted data-loader delay per batch on rank straggler_rank, or 0: straggler_share of the DDP
    # step the rounds measure (a straggler as jobs meet it, 10-20% of a step, not a stalled rank); rounds:
    # interleaved timed rounds of the five variants; bucket_caps: the bucket_cap_mb sweep (the model
    # holds 2.5 MB of gradients at smoke: 0.25 MB gives one bucket per large weight, 25 MB one bucket: a bucket_cap_mb
    # given explicitly caps the first bucket too).
    # Smoke: one launch of 2 ranks ~25-40 s on a 2-core machine (~10 s of it importing torch in each rank); the
    # notebook 45-80 s under nbmake here (a machine shared with other jobs). 24 rounds: with 16, DDP against the
    # single process said "no difference" once in 7 runs (load average 17-24 on 2 cores), "faster" 6 times.
    # Measured on the H100 reference run (data/reference/h100/06_distributed/run.json): 34.4 s for the whole notebook
    # on its CPU fallback (one GPU: 2 gloo ranks at smoke sizes, the single process 91.9 ms and DDP 43.5 ms per step).
    # Full, with NCCL (two GPUs or more): not yet measured; sized to fit budget_s: ~15 s to start the ranks (torch and
    # NCCL), (3 + 12) x 5 timed steps and 6 profiles of 5 steps of a 4-layer MLP of 4096 (a few ms a step on a GPU;
    # the straggler's 50 ms a batch: ~1 s), then 12 traces read. budget_s / reserve_s: the time guard
    # (helpers.notebook.budget) caps the job's timeout (at full scale, and on a GPU machine's CPU fallback); the
    # appendix's bad inputs always run.
    "smoke": dict(
        ranks=2,
        threads=1,
        batch_size=2048,
        features=256,
        hidden=512,
        layers=3,
        classes=10,
        micro_batch=8,
        accum=8,
        rounds=30,  # of two steps per variant, the second timed (06's docs: the straggler)
        warmup=2,
        bucket_caps=[0.25, 25.0],
        bucket_cap_mb=25.0,
        straggler_rank=0,  # rank 0 runs a little slower (it hosts the rendezvous): a delay on rank 1 hides
        straggler_ms=0.0,  # 0: the delay is straggler_share of the DDP step, measured in the rounds
        straggler_share=0.2,  # 20% of the DDP step: 17% of the straggler's (at 18%, a loaded make test read
        # 1.07x [0.94, 1.19], no difference; at 20% and 40 rounds a quiet one read 1.14x [1.05, 1.24], slower)
        wait=1,
        warmup_steps=1,
        active=3,
        n_batches=4,
        timeout_s=240,
        budget_s=None,
        reserve_s=0,
    ),
    "full": dict(
        ranks=None,
        threads=None,
        batch_size=512,
        features=4096,
        hidden=4096,
        layers=4,
        classes=1000,
        micro_batch=32,
        accum=4,
        rounds=12,
        warmup=3,
        bucket_caps=[1.0, 25.0],
        bucket_cap_mb=25.0,
        straggler_rank=1,
        straggler_ms=0.0,
        straggler_share=0.18,
        wait=1,
        warmup_steps=1,
        active=3,
        n_batches=4,
        timeout_s=40,
        budget_s=50,
        reserve_s=10,
    ),
}

MEMORY = {
    # 07_memory: what each size is for, and its timings, in docs/lessons/07_memory.md.
    "smoke": dict(
        width=64,
        hidden=1024,
        blocks=4,
        image_size=8,
        batch_size=128,
        micro_batches=2,
        rounds=30,
        cpu_threads=1,
        swin_batch=64,
        search_high=4096,
        budget_s=None,
        reserve_s=0,
    ),
    "full": dict(
        width=1024,
        hidden=4096,
        blocks=8,
        image_size=64,
        batch_size=512,
        micro_batches=4,
        rounds=10,
        cpu_threads=None,
        swin_batch=64,
        search_high=524288,
        budget_s=90,
        reserve_s=10,
    ),
}
