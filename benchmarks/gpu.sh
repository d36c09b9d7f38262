#!/usr/bin/env bash
# The GPU figures of the book and the README, by stage, as they were measured on one H100
# (benchmarks/results/*_gpu.json record each command, the GPU and the torch version):
#
#   bash benchmarks/gpu.sh tests                      # the CUDA-marked tests
#   bash benchmarks/gpu.sh throughput DATA            # Trainer.train_step, base and big: tokens/s, MFU
#   bash benchmarks/gpu.sh packing DATA               # padded batches, packed rows, packed without CUDA graphs
#   bash benchmarks/gpu.sh tuning DATA                # packed rows with and without Inductor's kernel tuning
#   bash benchmarks/gpu.sh ablation                   # the base step, one speed choice undone at a time
#   bash benchmarks/gpu.sh stream DATA                # packed rows, the residual stream in bf16 and in fp32
#   bash benchmarks/gpu.sh bare                       # the bare model step beside nn.Transformer
#   bash benchmarks/gpu.sh attention                  # cuDNN's masked attention at lengths 64 mod 128
#   bash benchmarks/gpu.sh profile                    # where a base step's time goes (Trainer, bare)
#   bash benchmarks/gpu.sh multi30k DATA MINUTES NAME=FLAGS...  # recipes side by side, scored
#
# The Multi30k runs of benchmarks/results/multi30k_gpu_*.json:
#   bash benchmarks/gpu.sh multi30k DATA 5 small="--preset small" tiny="--preset tiny --post-ln --max-steps 8000" \
#       tiny16k="--preset tiny --post-ln --max-steps 16000"
#   bash benchmarks/gpu.sh multi30k DATA 3 small-d03="--preset small --dropout 0.3" \
#       small-d03-preln="--preset small --dropout 0.3 --pre-ln" tiny-preln="--preset tiny --pre-ln"
#   bash benchmarks/gpu.sh multi30k DATA 4.5 tinypre="--preset tiny --pre-ln" \
#       tinypre8k="--preset tiny --pre-ln --max-tokens 8192" \
#       smallpre8k="--preset small --dropout 0.3 --pre-ln --max-tokens 8000" \
#       basepre="--preset base --vocab-size 8000 --max-tokens 8000 --dropout 0.3 --pre-ln --warmup-steps 1000"
#   bash benchmarks/gpu.sh decoding DATA RUN          # greedy and beam: no cache, growing, static (CUDA
#                                                     # graphs), batches of 1/16/128, fp32 and bf16
#   bash benchmarks/gpu.sh recipe DATA SEEDS...       # the plain lowercased train command (its GPU default:
#                                                     # 16,000 updates), then evaluate; about 9 min a seed on
#                                                     # one H100 (multi30k_en_de_lc_gpu.json)
#
# DATA is the Multi30k folder (default ../shared/data/multi30k); results go to
# benchmarks/results, logs and runs to runs/gpu.
set -euo pipefail
stage=${1:?stage: tests, throughput, packing, tuning, stream, ablation, bare, attention, profile, multi30k, decoding or recipe}
data=${2:-../shared/data/multi30k}
logs=runs/gpu
results=benchmarks/results
mkdir -p "$logs" "$results"
export PYTHONUNBUFFERED=1

case $stage in
tests)
    # in parallel where pytest-xdist is installed (each test compiles its own steps). On one H200
    # with 8 workers: 13 tests in 106 s; at the kernel-tuning commit the 13 did not all finish in
    # 175 s (12 passed, 1 still running), so give this stage 300 s or more
    workers=$(python -c "import xdist" 2>/dev/null && echo "-n 8" || true)
    python -m pytest -q -m gpu -p no:cacheprovider $workers tests/test_attention.py tests/test_model.py \
        tests/test_decoding.py tests/test_trainer.py
    ;;
throughput)
    # the step users run, warm, at the paper's 25,000 tokens per update: on Multi30k and a
    # generated corpus with a vocabulary of 8,000, then on the generated corpus with the paper's
    # 37,000 (trainer_step_gpu_*_37k.json: measured with --warmup 40 and written as
    # train_gpu_PRESET.json, then renamed, since that name holds the bare step's record)
    for preset in base big; do
        python benchmarks/trainer_step.py --device cuda --presets "$preset" --data "$data" \
            --vocab-size 8000 --warmup 15 --out "$results/trainer_step_gpu_$preset.json"
        python benchmarks/trainer_step.py --device cuda --presets "$preset" --warmup 40 \
            --out "$results/trainer_step_gpu_${preset}_37k.json"
    done
    ;;
packing)
    # Trainer.train_step with batches by length, packed rows (CUDA graphs on one GPU) and packed
    # rows without CUDA graphs: base at the paper's vocabulary on the generated corpus, base and
    # big on Multi30k (trainer_step_gpu_*_packing.json). The first record was measured at a
    # commit that replayed CUDA graphs only when asked, as its command's names say.
    python benchmarks/trainer_step.py --device cuda --presets base --corpora generated --pairs 60000 \
        --vocab-size 37000 --warmup 30 --batching padded packed "packed, no CUDA graphs" \
        --out "$results/trainer_step_gpu_base_packing.json"
    python benchmarks/trainer_step.py --device cuda --presets base --corpora multi30k --data "$data" \
        --vocab-size 8000 --warmup 30 --batching padded packed "packed, no CUDA graphs" \
        --out "$results/trainer_step_gpu_base_multi30k_packing.json"
    python benchmarks/trainer_step.py --device cuda --presets big --corpora multi30k --data "$data" \
        --vocab-size 8000 --warmup 20 --steps 15 --batching padded packed \
        --out "$results/trainer_step_gpu_big_multi30k_packing.json"
    ;;
tuning)
    # the packed step (CUDA graphs, kernels tuned) beside it without the tuning and with
    # max-autotune (not yet measured). trainer_step_gpu_base_tuning.json, which the book and the
    # README read, measured the first two on one H200 at a commit whose Trainer did not tune
    # ("packed" and "packed, coordinate descent" then): these write records of their own
    python benchmarks/trainer_step.py --device cuda --presets base --corpora multi30k --data "$data" \
        --vocab-size 8000 --warmup 20 --batching packed "packed, no kernel tuning" "packed, max-autotune" \
        --out "$results/trainer_step_gpu_base_tuned.json"
    python benchmarks/trainer_step.py --device cuda --presets big --corpora multi30k --data "$data" \
        --vocab-size 8000 --warmup 20 --steps 15 --batching packed "packed, no kernel tuning" \
        --out "$results/trainer_step_gpu_big_tuned.json"
    ;;
stream)
    # the packed step as shipped (the residual stream in autocast's bf16) beside it with the
    # stream kept in fp32, as before the model's LayerNorm returned its input's dtype, in one
    # process (not yet measured)
    python benchmarks/trainer_step.py --device cuda --presets base --corpora multi30k --data "$data" \
        --vocab-size 8000 --warmup 20 --batching packed "packed, fp32 residual stream" \
        --out "$results/trainer_step_gpu_base_stream.json"
    python benchmarks/trainer_step.py --device cuda --presets big --corpora multi30k --data "$data" \
        --vocab-size 8000 --warmup 20 --steps 15 --batching packed "packed, fp32 residual stream" \
        --out "$results/trainer_step_gpu_big_stream.json"
    ;;
ablation)
    # the base step with one of the Trainer's speed choices undone at a time (not yet measured)
    python benchmarks/trainer_step.py --device cuda --presets base --ablation \
        --out "$results/trainer_step_gpu_ablation.json"
    ;;
attention)
    python benchmarks/cudnn_attention.py --out "$results/cudnn_attention_gpu.json"
    ;;
bare)
    # the bare model step (no Trainer) on a batch of 800 sentences of 28 to 32 tokens
    for preset in base big; do
        python benchmarks/train_throughput.py --device cuda --preset "$preset" --batch 800 --length 32 \
            --min-length 28 --precisions bf16 --compile --warmup 5 --steps 20 --repeats 1 \
            --trainer-tokens 25000 --json "$results/train_gpu_$preset.json"
    done
    ;;
profile)
    # profile_gpu_base.json: padded batches of the generated corpus, at an older commit; then the
    # packed Multi30k step as shipped (not yet measured)
    python benchmarks/profile_step.py --device cuda --preset base --max-tokens 25000 --pairs 10000 \
        --warmup 15 --steps 5 --json "$results/profile_gpu_base.json"
    python benchmarks/profile_step.py --device cuda --preset base --data "$data" --vocab-size 8000 \
        --pack-length 128 --warmup 20 --steps 5 --json "$results/profile_gpu_base_packed.json"
    ;;
recipe)
    shift $(( $# < 2 ? $# : 2 ))
    python benchmarks/cli_runs.py --seeds "${@:-0}" --data "$data" --src en --tgt de --runs "$logs/lc" \
        --out "$results/multi30k_en_de_lc_gpu.json" -- --lowercase
    ;;
multi30k)
    # Recipes trained at once on the one GPU, each NAME=FLAGS (FLAGS added to train's); each gets
    # a share of the GPU, so each trains for at most `minutes` of a whole GPU. Then each run is
    # scored on test_2016_flickr: its newest checkpoint and the average of its last 10.
    minutes=${3:?minutes of training}
    shift 3
    names=()
    for recipe in "$@"; do
        name=${recipe%%=*}
        names+=("$name")
        read -ra flags <<< "${recipe#*=}"
        python -m transformer train "${flags[@]}" --data "$data" --src en --tgt de --max-minutes "$minutes" \
            --schedule paper --checkpoint-every 200 --keep-checkpoints 10 --overwrite --cache-dir "$logs/cache-$name" \
            --out "$logs/m30k-$name" > "$logs/m30k-$name.log" 2>&1 &
    done
    wait
    for name in "${names[@]}"; do
        tail -n 1 "$logs/m30k-$name.log"
        python benchmarks/multi30k.py --run "$logs/m30k-$name" --data "$data" --src en --tgt de \
            --budgets "$minutes" --average 10 --device cuda --out "$results/multi30k_gpu_$name.json" \
            > "$logs/score-$name.log" 2>&1 &
    done
    wait
    tail -n 4 "$logs"/score-*.log
    ;;
decoding)
    run=${3:?the training folder whose newest checkpoint is decoded}
    # about 4 minutes on one H200 (the first try, with a 200-second limit, reached bf16 at batch 16)
    python benchmarks/decoding_speed.py --checkpoint "$run" --data "$data" --device cuda \
        --out "$results/decoding_gpu_static_cache.json"
    ;;
*)
    echo "unknown stage $stage: expected tests, throughput, packing, tuning, stream, ablation, bare, attention, profile, multi30k, decoding or recipe" >&2
    exit 2
    ;;
esac
