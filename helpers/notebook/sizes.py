"""Every notebook's sizes at each scale, in one place (``env.params`` picks the row).

``smoke``: a 2-core CPU in about 2 minutes per notebook (CI). ``full``: the source
articles' sizes on a GPU.
"""

PROFILER_BASICS = {
    # rounds x round_steps: the profiler's overhead, profiled and unprofiled blocks in alternation; timer_rounds: the
    # asynchronous-timing demo's readings per timer (GPU only). cpu_threads: intra-op threads on a CPU (1: on a small
    # machine shared with other work, two OpenMP threads waiting for each other made a 17 ms step take 100-230 ms);
    # None leaves torch's default. Smoke batch 8: the profiler costs about a microsecond per op (~0.4 ms a step
    # here), which on a ~5 ms step (~9%) stands clear of a shared 2-core machine's noise; on a 16 ms one (batch 32)
    # it did not in every run. active=8 at smoke: with steps this short, a few profiled steps let one preemption by
    # another process decide which row tops the self-time order.
    "smoke": dict(batch_size=8, image_size=32, width=16, blocks=3, steps=10, warmup=5,
                  wait=1, warmup_steps=1, active=8, rounds=20, round_steps=5, cpu_threads=1,
                  matmul_size=256, matmul_repeats=20, timer_rounds=5),
    "full": dict(batch_size=256, image_size=224, width=64, blocks=4, steps=30, warmup=10,
                 wait=1, warmup_steps=3, active=5, rounds=4, round_steps=5, cpu_threads=None,
                 matmul_size=8192, matmul_repeats=50, timer_rounds=5),
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
    # sweep_workers: the num_workers sweep's points (those up to the cores, plus num_workers and twice it).
    # profile_rounds x profile_cycles: the profiled windows with workers (the idle share), the variants in turns, each
    # window that many full worker cycles, the share pooled over the windows. Smoke 3 x 4: with one window of 2 cycles
    # the best pipeline's share was longer than the baseline's or within 0.01 of it in 2 of 8 runs (0.799 vs 0.777,
    # 0.663 vs 0.666): a wave loader waits once per cycle, so a short window's share depends on where in the wave it
    # starts, and a burst of other load can fall on one variant's window only. Measured here with a process busy 0.7 s
    # in every 1.2 s on one core: baseline minus best share 1 x 2: -0.07 to +0.25, below 0 in 2 of 8; 2 x 4: -0.05 to
    # +0.26, 1 of 8; 3 x 4: +0.06 to +0.15, 0 of 8 (~2.7 s for both variants on a quiet machine, against ~0.6 s).
    # Full: one window of one cycle (the estimate below).
    # budget_s / reserve_s: the notebook's time guard (helpers.notebook.budget; $PERF_TIME_BUDGET_S wins): once
    # budget_s - reserve_s are spent, what is left becomes skipped rows. Smoke: generous, never reached in CI.
    # Full scale on one H100 (16 cores, so 4 workers and the sweep's 8 have a core each): ~5.5 min, estimated
    # (not measured). Method: every row's batches counted from these sizes (experiment._plan: timed cycles + one warm-up
    # cycle per round; 2 rounds), each costed at the time one worker takes for a batch of 256 crops, measured here
    # on a CPU (one thread, fastest of 3 batches, a loaded 2-core machine): baseline 3.7 s, bool_dilation 1.4,
    # crop_first 1.2, batch_collate 1.6, uint8_device 1.1 (its colour and scaling on the GPU), divided by the workers;
    # the toy CNN's GPU step (~20 ms) is small beside it. Sweep (T_batch, 0, 4, 8 workers) ~1.5 min; every variant
    # and its T_batch in the loop ~1.7 min; the options ~0.6; the profiles (one process and with workers) ~0.7;
    # the baseline row, decode, dilation, bad inputs ~0.4; kernel start, TensorBoard, trace views ~0.75. The old
    # sizes (warm-up 5, 3 cycles, 12 sweep steps at 0-16 workers) came to ~13 min this way, ~47% of it in the 0- and
    # 1-worker rows (the issue: 7-12 min, 40%); so full runs warm up one worker cycle (not 5 batches), time 2 cycles
    # a round, have no 1-, 2- or 16-worker point, and time the pipeline alone for one batch a round. The guard
    # (330 s, 30 s of it kept for the results) leaves ~300 s for experiments against ~290 s estimated: on a slower
    # CPU the last rows (the appendix's) become skipped rows instead of an overrun.
    "smoke": dict(crop=256, batch_size=8, dataset_size=128, num_workers=4, steps=12, warmup=1, cycles=3, rounds=5,
                  ceiling_steps=10, sweep_steps=12, pipe_steps=15, profile_steps=3, profile_cycles=4, profile_rounds=3,
                  dilation_repeats=20, decode_repeats=10, mask_ratio=0.25, stand_in_ms=None, stand_in_ratio=0.35,
                  sweep_workers=[0, 1, 2, 4, 8, 16, 32], budget_s=600, reserve_s=30),
    "full": dict(crop=256, batch_size=256, dataset_size=10_000, num_workers=4, steps=8, warmup=1, cycles=2, rounds=2,
                 ceiling_steps=30, sweep_steps=2, pipe_steps=2, profile_steps=1, profile_cycles=1, profile_rounds=1,
                 dilation_repeats=100, decode_repeats=50, mask_ratio=0.25, stand_in_ms=200, stand_in_ratio=0.35,
                 sweep_workers=[0, 4, 8], budget_s=330, reserve_s=30),
}

BACKWARD_HOOKS = {
    # rounds: interleaved rounds of the timed comparisons (one step of each variant per round). Smoke: 48 rounds of a
    # ~10 ms step, so that a comparison whose true difference is nil says "no difference" in ~97% of runs on a
    # shared 2-core machine (78 of 80 here; 12 rounds: 76 of 80). Full: 20 rounds (GPU step times vary little).
    "smoke": dict(batch_size=8, image_size=64, patch_size=16, depth=2, width=192, heads=3, steps=6, warmup=2,
                  rounds=48, wait=1, warmup_steps=1, active=2),
    "full": dict(batch_size=128, image_size=224, patch_size=16, depth=12, width=768, heads=12, steps=20, warmup=5,
                 rounds=20, wait=1, warmup_steps=4, active=3),
}

TORCH_COMPILE = {
    # cells: (model, precision, mode) training runs, the most important first; an eager cell per (model, precision)
    # is the baseline. profile: the (model, precision) whose eager and compiled steps are profiled (a compiled
    # matrix cell, so its second compile reads the FX-graph cache). budget_s / reserve_s: the notebook's time guard
    # (helpers.notebook.budget; the runner's --budget wins), reserve_s of it kept for the results; matrix_s: the
    # matrix's share of notebook time (no cell starts after it, a cell still running then is stopped).
    # Full scale on one H100: ~5.5 min, bounded at 5.75 by the guard (estimates, not measured). Method: compile
    # time dominates and is per graph, not per step: a cold training compile (forward and backward) of Swin-T ~30-50 s,
    # Swin-B ~60-120 s (the article: 129 s on its machine), reduce-overhead on Swin-T after its default cell ~20-30 s
    # (the Triton kernels are cached, the CUDA graphs are recorded in the first steps); each cell's 3 + 20 steps of
    # batch 64 at 224x224 take ~2-5 s (~100-200 ms a step in fp16). Matrix: 7 cells, three cold compiles + one
    # reduce-overhead, ~150-250 s, cut at matrix_s = 200 s of notebook time (the cells last in the list become skipped
    # rows if the compiles run slow). The rest ~110 s: the graph-break cells (MLP 64x64 -> 4096, batch 256: two small
    # compiles, 4 x 33 steps, ~25 s), explain on Swin-T and ConvNeXt-L (forward traces, ~10-15 s each), two
    # fresh-process starts of an MLP (import + compile, ~15 s each), the profiled Swin-T pair (its compile from the
    # FX-graph cache, ~20-30 s), TensorBoard ~5 s; each also runs under the guard. ConvNeXt-L and the fp32 (TF32)
    # cells are not in the full matrix (they would not fit 6 minutes): the panel runs them. Not in these estimates yet
    # (issue 30): the open first-call demo (the MLP toy compiled under fp16 autocast, ~10-20 s) and the interleaved
    # rounds on the GPU (~15 s); the guard bounds them like the rest.
    # Smoke: the gated MLP (the notebook's gated_mlp: width 32, hidden 512, two blocks; 8x8 images flattened, batch
    # 256), one intra-op thread. Chosen because Inductor's CPU fusion shows on it beyond noise on a shared 2-core
    # machine: measured here (eager vs compiled training steps with RAdam, 30 interleaved rounds, 1 thread, 4 other
    # jobs running) 1.73x [1.59, 1.89], 1.65x [1.34, 2.03]; one gated block 1.44x [1.34, 1.57]. Batch 64 / width 64 gave
    # 1.15x [1.00, 1.26] (no difference: at small activations the eager optimizer and the matrix products dominate),
    # and ViT-Mini (matrix products in oneDNN either way) 1.04x with overlapping quartiles. interleave_rounds: rounds
    # of each (model, precision) group's eager and compiled steps in alternation, for compare_times' interval (smoke:
    # 30, ~20 ms a round here; full: 20 on the GPU too, one group's models alive at a time, ~15 s in all).
    # explain_image_size: the Swin/ConvNeXt configurations explain traces (patch and window sizes need > 8x8 pixels).
    # start_cell: the small MLP (helpers.lessons.torch_compile.dynamo.start_child) compiled in two fresh processes.
    # The graph-break toy (the notebook's ClampMLP) at smoke: 8x8 images (192 inputs) -> 64 -> 10, batch 16, so that a
    # step is a handful of small operator calls and per-call overhead is most of it: the break's cost (two more graphs
    # with their wrappers, a return to Python, the .item()) then stands out, mlp_rounds = 120 interleaved rounds of
    # ~1-2 ms steps (< 1 s). Measured here under load (load average 4-6, 30 or 120 rounds, six runs): fixed vs broken
    # 1.20x to 1.26x, "faster" in 5 of 6 (one [0.88, 1.37] at 30 rounds); compiled vs eager 0.54-0.68x (broken) and
    # 0.71-0.80x (fixed), "slower" in each: compile's per-graph-call overhead outweighs what it saves on a model this
    # small. The previous toy (32x32 images -> 256, batch 64: a step dominated by the first matrix product and the
    # optimizer) gave 0.91-1.02x, verdicts that changed from run to run.
    "smoke": dict(cells=[("gated_mlp", "fp32", "eager"), ("gated_mlp", "fp32", "default")],
                  image_size=8, batch_size=256, hidden=512, compile_steps=2, steps=8, n_batches=4,
                  mlp_image_size=8, mlp_hidden=64, mlp_batch_size=16, mlp_steps=10, mlp_rounds=120,
                  interleave_rounds=30, explain_models=["swin_mini", "convnext_mini"], explain_image_size=64,
                  start_cell=dict(image_size=8, hidden=16, batch_size=4, compile_steps=2),
                  profile=("gated_mlp", "fp32"), cpu_threads=1,
                  budget_s=None, reserve_s=0, matrix_s=None),
    "full": dict(cells=[("swin_b", "fp16", "eager"), ("swin_b", "fp16", "default"),      # the article's best cell
                        ("swin_t", "fp16", "eager"), ("swin_t", "fp16", "default"),      # the article's "slower" model
                        ("swin_t", "fp16", "reduce-overhead"),                           # CUDA graphs (Triton kernels
                                                                                         # mostly the ones above)
                        ("swin_t", "bf16", "eager"), ("swin_t", "bf16", "default")],     # bf16 beside fp16
                 image_size=224, batch_size=64, hidden=512, compile_steps=3, steps=20, n_batches=4,
                 mlp_image_size=64, mlp_hidden=4096, mlp_batch_size=256, mlp_steps=30, mlp_rounds=30,
                 interleave_rounds=20,
                 explain_models=["swin_t", "convnext_large"], explain_image_size=224,
                 start_cell=dict(image_size=64, hidden=4096, batch_size=256, compile_steps=3),
                 cpu_threads=None,
                 profile=("swin_t", "fp16"),  # not Swin-B: a second Swin-B trace + compile would cost ~1 min
                 budget_s=345, reserve_s=15, matrix_s=200),
}

DIAGNOSE = {
    # planted bottlenecks (05's planted_step, in its cells): input_ms per sample, tiny_ops per forward, one
    # matmul x matmul product, sync_ms of host work after a per-step .item(); the MLP: batch_size x features
    # -> hidden -> 10; profiler schedule wait / warmup_steps / active; "measure again": each plant and its fix timed
    # without the profiler in `rounds` interleaved rounds after `timing_warmup` untimed calls (smoke: the plants cost
    # ~18, ~43 and ~58 ms against a 1.2 ms step here, so 15 rounds give intervals far from 1 in ~5 s)
    "smoke": dict(batch_size=8, features=64, hidden=64, input_ms=2.0, tiny_ops=2000, matmul=768, sync_ms=20.0,
                  wait=1, warmup_steps=1, active=3, rounds=15, timing_warmup=2),
    "full": dict(batch_size=64, features=1024, hidden=4096, input_ms=1.0, tiny_ops=3000, matmul=8192,
                 sync_ms=20.0, wait=2, warmup_steps=3, active=5, rounds=20, timing_warmup=3),
}

DISTRIBUTED = {
    # ranks: processes (gloo on a CPU, one intra-op thread each; NCCL with one GPU each, None: every GPU). batch_size:
    # the global batch (single process: all of it; DDP: batch_size / ranks per rank); micro_batch x accum: the
    # accumulation experiment's optimizer step (small micro-batches, so the all-reduce it saves stands out);
    # straggler_ms: the planted data-loader delay per batch on rank straggler_rank (several steps long, far beyond
    # noise); rounds: interleaved timed rounds of the five variants; bucket_caps: the bucket_cap_mb sweep (the model
    # holds 2.6 MB of gradients at smoke: 0.25 MB gives one bucket per large weight, 25 MB one bucket: a bucket_cap_mb given explicitly caps the first bucket too).
    # Smoke: one launch of 2 ranks ~25-40 s on a 2-core machine (~10 s of it importing torch in each rank); the
    # notebook 45-80 s under nbmake here (a machine shared with other jobs). 24 rounds: with 16, DDP against the
    # single process said "no difference" once in 7 runs (load average 17-24 on 2 cores), "faster" 6 times.
    "smoke": dict(ranks=2, threads=1, batch_size=2048, features=256, hidden=512, layers=3, classes=10, micro_batch=8,
                  accum=8, rounds=24, warmup=2, bucket_caps=[0.25, 25.0], bucket_cap_mb=25.0, straggler_rank=1,
                  straggler_ms=120.0, wait=1, warmup_steps=1, active=3, n_batches=4, timeout_s=240),
    "full": dict(ranks=None, threads=None, batch_size=512, features=4096, hidden=4096, layers=4, classes=1000,
                 micro_batch=32, accum=4, rounds=20, warmup=5, bucket_caps=[1.0, 25.0, 100.0], bucket_cap_mb=25.0,
                 straggler_rank=1, straggler_ms=100.0, wait=1, warmup_steps=2, active=3, n_batches=4, timeout_s=420),
}
