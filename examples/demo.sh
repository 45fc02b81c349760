#!/usr/bin/env bash
# The main job on the shipped example: a Panda pick rollout from one scene image.
#   bash examples/demo.sh [path/to/k4d]     (make demo passes .venv/bin/k4d)
# Writes out/demo/ (rgb.mp4, pointmap.npz, robot.npz, the 8-bit pointmap video +
# metadata, summary.json, viewer.html, rollout.rrd) and prints where they are.
set -euo pipefail

K4D="${1:-k4d}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXAMPLE="$ROOT/examples/panda_pick"
OUT="${K4D_DEMO_OUT:-$ROOT/out/demo}"
clip=()
# The default model (k4d_embedded.shipped: $K4D_DEFAULT_MODEL, or models/demo-small when its
# manifest says "default": true) samples its own clip: then the demo runs the held-out
# synthetic scene shipped at that resolution, examples/demo_heldout.
PY="$(dirname "$(command -v "$K4D" 2>/dev/null || echo "$K4D")")/python"
if [[ -x "$PY" ]] && [[ -n "$("$PY" -c 'from k4d_embedded.shipped import default_model; print(default_model())' 2>/dev/null)" ]]; then
  EXAMPLE="$ROOT/examples/demo_heldout"
  clip=(--frames "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["num_frames"])' "$EXAMPLE/actions.json")")
fi

missing=()
command -v "$K4D" >/dev/null 2>&1 || missing+=("the k4d CLI at '$K4D' (run 'make setup')")
for f in actions.json scene.png camera.json; do
  [[ -f "$EXAMPLE/$f" ]] || missing+=("example file examples/panda_pick/$f")
done
if [[ ${#missing[@]} -eq 0 ]] && ! "$K4D" simulate --help >/dev/null 2>&1; then
  missing+=("the 'k4d simulate' command (package k4d-embedded and its stage packages "
            "k4d-kinematics, k4d-projection, k4d-generator must be installed and importable)")
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "demo: cannot run, missing:" >&2
  for m in "${missing[@]}"; do echo "  - $m" >&2; done
  exit 1
fi

"$K4D" simulate --robot panda \
  --actions "$EXAMPLE/actions.json" \
  --image "$EXAMPLE/scene.png" \
  --camera "$EXAMPLE/camera.json" \
  "${clip[@]}" \
  --out "$OUT"

echo
if [[ ${#clip[@]} -gt 0 ]]; then
  # The default model's own held-out figures, in one line (its manifest's `heldout`).
  "$PY" -c 'from k4d_embedded.shipped import heldout_line; line = heldout_line(); print(line) if line else None' || true
fi
echo "demo outputs in $OUT:"
for f in rgb.mp4 pointmap.npz robot.npz pointmap_k4d.mp4 pointmap_k4d.json summary.json viewer.html \
         rollout.rrd; do
  [[ -e "$OUT/$f" ]] && echo "  $OUT/$f"
done
echo "open the 4D viewer: $K4D view $OUT   (Rerun: native window, or the web viewer on"
echo "  127.0.0.1 without a display; or open $OUT/viewer.html in any browser, no install)"
