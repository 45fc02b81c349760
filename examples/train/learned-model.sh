#!/usr/bin/env bash
# The learned world model's recipe (issue 45, ADR 019) from a fresh clone:
#   1. workspace-framed episodes with k4d datagen: train (seed 1013) and validation (9013)
#   2. k4d train --config examples/train/learned-model.yaml: the per-frame VAE (its held-out
#      reconstruction in RUN/vae/heldout.json), the latent cache, the transformer on the
#      change from frame 0; resumable (--resume continues the newest checkpoint)
#   3. export to $OUT (manifest with sha256, loss.png), k4d eval run on validation against
#      the floor, and the transformer ablation (ablate_fidelity.py --ablate-transformer)
#   bash examples/train/learned-model.sh [path/to/k4d]
# Settings (environment): LEARNED_OUT (the exported model, default .k4d/learned/model),
# LEARNED_RUN (run directory, default .k4d/learned/run), LEARNED_STEPS (transformer steps,
# default the recipe's), LEARNED_NPROC (training processes, default 2), LEARNED_SKIP_TRAIN=1
# (export and evaluate only).
set -euo pipefail

K4D="${1:-k4d}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="$(dirname "$(command -v "$K4D")")/python"
WORK=.k4d/learned
RUN="${LEARNED_RUN:-$WORK/run}"
OUT="${LEARNED_OUT:-$WORK/model}"
CONFIG=examples/train/learned-model.yaml
export MUJOCO_GL="${MUJOCO_GL:-osmesa}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # one thread per process (ADR in demo-model.sh)

step() { echo "learned-model: $1 at $(date -u +%H:%M:%S)"; }
step "data generation"
for split in "train 384 1013 0.1" "val 16 9013 0.25"; do
  read -r name count seed failures <<<"$split"
  "$K4D" datagen synthetic --episodes "$count" --seed "$seed" --task mix --failures "$failures" \
    --frames 13 --height 96 --width 144 --workers 2 --framing workspace \
    --out "$WORK/data/$name" --no-progress
done
if [[ "${LEARNED_SKIP_TRAIN:-0}" != 1 ]]; then
  steps=()
  [[ -n "${LEARNED_STEPS:-}" ]] && steps=(--steps "$LEARNED_STEPS")
  step "training"
  "$K4D" train --config "$CONFIG" --out "$RUN" --resume --nproc "${LEARNED_NPROC:-2}" "${steps[@]}"
fi
step "export"
"$PY" examples/train/demo_model.py export --config "$CONFIG" --run "$RUN" --out "$OUT" \
  --label trained --name k4d-learned-small
step "validation evaluation"
"$K4D" eval run --model "$OUT" --data "$WORK/data/val" --out "$WORK/eval" --no-progress
"$PY" examples/train/demo_model.py headline --model "$OUT" --report "$WORK/eval/report.json"
step "transformer ablation"
"$PY" benchmarks/demo_model/ablate_fidelity.py --model "$OUT/weights" --data "$WORK/data/val" \
  --run "$WORK/eval" --out "$WORK/ablation" --ablate-transformer
"$PY" benchmarks/demo_model/ablate_fidelity.py --out "$WORK/ablation" --table --model "$OUT" \
  --data "$WORK/data/val" --run "$WORK/eval"
step "done"
