#!/usr/bin/env bash
# `make bench-gpu`: everything that needs a GPU, as ONE call of <= 9 min on a lent H100,
# into ONE results file (JSON). The sections and the file: benchmarks/gpu/suite.py and
# docs/benchmarks.md ("GPU run").
#
#   bash benchmarks/gpu/run.sh prepare            # HERE, with pip access: build the wheels
#   bash benchmarks/gpu/run.sh [--out FILE]       # ON THE GPU MACHINE: install them, run
#   bash benchmarks/gpu/run.sh --dry-run [--out FILE]   # here, CPU, tiny shapes: the check
#
# The lent machine has PyTorch (and transformers, peft, onnxruntime, ...) but neither
# diffusers nor our packages, and it cannot reach a package index. `prepare` fills
# benchmarks/gpu/wheels/ (git-ignored: never commit wheels) with
#   - our packages, built here: k4d-runtime, k4d-model, k4d-generator, k4d-trainer;
#   - the third-party packages those import that the machine lacks (CARRIED below, at the
#     versions of constraints.txt, for CPython 3.12 on manylinux x86_64, without their
#     dependencies: the machine has the rest). The list was read off the modules a
#     dry run imports, less the machine's own packages
#     (/work/.library/device/KINDS.md, "Python packages already there").
# The run then installs them with `pip install --no-index --no-deps --target` into a
# private folder put first on PYTHONPATH, so the machine's own torch is used.
# Calling it through the device tool: carry benchmarks/gpu/wheels (it is ignored, so it
# travels only when named) and write the file under $OUT:
#   run(command="bash benchmarks/gpu/run.sh --out $OUT/bench-gpu.json",
#       carry=["benchmarks/gpu/wheels"], timeout_s=600)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WHEELS="$HERE/wheels"
CARRIED=(diffusers zarr numcodecs donfig google-crc32c cache-dit)
# Needed on the GPU only (quant_fp8), so not installed here nor in constraints.txt:
# torchao's float8 quantisation (3.4 MB abi3 wheel).
GPU_ONLY=(torchao==0.18.0)
PROJECT=(libs/runtime libs/model libs/tabletop services/generator services/trainer)

pick_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
  elif [[ -x "$ROOT/.venv/bin/python" ]]; then echo "$ROOT/.venv/bin/python"
  else echo python3; fi
}

if [[ "${1:-}" == "prepare" ]]; then
  PY="$(pick_python)"
  rm -rf "$WHEELS" && mkdir -p "$WHEELS"
  build="$(mktemp -d)"
  trap 'rm -rf "$build"' EXIT
  for project in "${PROJECT[@]}"; do
    # Built from a copy: setuptools leaves build/ folders beside the sources it builds.
    cp -r "$ROOT/$project" "$build/$(basename "$project")"
    "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" "$build/$(basename "$project")"
  done
  pins=()
  for name in "${CARRIED[@]}"; do
    pin="$(grep -i "^${name}==" "$ROOT/constraints.txt" || true)"
    [[ -n "$pin" ]] || { echo "bench-gpu prepare: $name is not pinned in constraints.txt" >&2; exit 2; }
    pins+=("$pin")
  done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$WHEELS" "${pins[@]}" "${GPU_ONLY[@]}"
  ls -l "$WHEELS"
  du -sh "$WHEELS"
  exit 0
fi

PY="$(pick_python)"
dry_run=0
for arg in "$@"; do [[ "$arg" == "--dry-run" ]] && dry_run=1; done
if [[ $dry_run -eq 0 ]] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE="${TMPDIR:-/tmp}/k4d-bench-gpu-site"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
elif [[ $dry_run -eq 0 ]]; then
  echo "bench-gpu: no wheels in $WHEELS: using the packages installed for $PY" \
       "(run 'bash benchmarks/gpu/run.sh prepare' here first for a lent machine)" >&2
fi
export PYTHONUNBUFFERED=1
exec "$PY" "$HERE/suite.py" "$@"
