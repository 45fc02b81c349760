#!/usr/bin/env bash
# The demo model's recipe from a fresh clone (`make demo-model`, ADR 019, model card
# models/demo-small/README.md):
#   1. workspace-framed episodes with k4d datagen (.k4d/demo-model/data): train (seed 1013,
#      6144: the transformer trains on the first 384), cascade (5077: the sample refiner's
#      rollouts), validation (9013), held-out (6271), shifted held-out (6389, objects 1.25x
#      larger, camera at 0.75x the distance) and shifted validation (7019, the same shift)
#   2. k4d train --config examples/train/demo-model.yaml: the per-frame VAE (its held-out
#      reconstruction in RUN/vae/heldout.json), the latent cache, the transformer on the
#      change from frame 0, then the sample refiner on the transformer's rollouts of the
#      cascade split; resumable (--resume continues the newest checkpoint)
#   3. export to models/demo-small (manifest with sha256, loss.png, golden.json)
#   4. k4d eval run on held-out and shifted held-out against the floor, and the transformer
#      ablation on held-out (ablate_fidelity.py --ablate-transformer); the validation split
#      is for judging changes to the recipe: k4d eval run --data .k4d/demo-model/data/val
#   bash examples/train/demo-model.sh [path/to/k4d]
# Settings (environment): DEMO_STEPS (transformer steps, default the recipe's), DEMO_NPROC
# (training processes, default 2), DEMO_RUN (run directory, default .k4d/demo-model/run),
# DEMO_OUT (the exported model, default models/demo-small), DEMO_DEFAULT (1, the default:
# the model `k4d simulate` uses without --model; 0: not), DEMO_SKIP_TRAIN=1 (export and
# evaluate only).
set -euo pipefail

K4D="${1:-k4d}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="$(dirname "$(command -v "$K4D")")/python"
WORK=.k4d/demo-model
RUN="${DEMO_RUN:-$WORK/run}"
MODEL="${DEMO_OUT:-models/demo-small}"
CONFIG=examples/train/demo-model.yaml
export MUJOCO_GL="${MUJOCO_GL:-osmesa}"
# One thread per process, DEMO_NPROC processes (default 2, data parallel): on a shared 2-core
# VM a 2-thread torch step was 2x (VAE) to 11x (transformer) slower than a 1-thread one
# under load (benchmarks/demo_model/bench_recipe.py).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# Each step says when it starts (UTC): the recipe's budget is <= 150 min on a 2-core machine
step() { echo "demo-model: $1 at $(date -u +%H:%M:%S)"; }
step "data generation"
for split in "train 6144 1013 0.1 objects=1,camera=1" "cascade 192 5077 0.1 objects=1,camera=1" \
             "val 16 9013 0.25 objects=1,camera=1" \
             "heldout 16 6271 0.25 objects=1,camera=1" "shifted 16 6389 0.25 objects=1.25,camera=0.75" \
             "shifted-val 16 7019 0.25 objects=1.25,camera=0.75"; do
  read -r name count seed failures shift <<<"$split"
  "$K4D" datagen synthetic --episodes "$count" --seed "$seed" --task mix --failures "$failures" \
    --frames 13 --height 96 --width 144 --workers 2 --framing workspace \
    --scene-shift "$shift" --out "$WORK/data/$name" --no-progress
done
if [[ "${DEMO_SKIP_TRAIN:-0}" != 1 ]]; then
  steps=()
  [[ -n "${DEMO_STEPS:-}" ]] && steps=(--steps "$DEMO_STEPS")
  step "training"
  "$K4D" train --config "$CONFIG" --out "$RUN" --resume --nproc "${DEMO_NPROC:-2}" "${steps[@]}"
fi
default=()
[[ "${DEMO_DEFAULT:-1}" == 1 ]] && default=(--default)
step "export"
"$PY" examples/train/demo_model.py export --config "$CONFIG" --run "$RUN" --out "$MODEL" \
  --label trained --name k4d-demo-small "${default[@]}"
"$PY" examples/train/demo_model.py golden --model "$MODEL"
for split in heldout shifted; do
  step "evaluation on $split"
  "$K4D" eval run --model "$MODEL" --data "$WORK/data/$split" --out "$WORK/eval-$split" --no-progress
done
"$PY" examples/train/demo_model.py headline --model "$MODEL" --report "$WORK/eval-heldout/report.json"
step "transformer ablation"
"$PY" benchmarks/demo_model/ablate_fidelity.py --model "$MODEL/weights" --data "$WORK/data/heldout" \
  --run "$WORK/eval-heldout" --out "$WORK/ablation" --ablate-transformer
"$PY" benchmarks/demo_model/ablate_fidelity.py --out "$WORK/ablation" --table --model "$MODEL" \
  --data "$WORK/data/heldout" --run "$WORK/eval-heldout"
mkdir -p "$MODEL/eval"
cp "$WORK/eval-heldout/summary.md" "$WORK/eval-heldout/summary.csv" \
   "$WORK/eval-heldout/per_frame.png" "$WORK/eval-heldout/strip.png" "$MODEL/eval/"
step "done"
echo "demo model in $MODEL (model card: $MODEL/README.md); evaluation: $WORK/eval-heldout/summary.md"
