#!/usr/bin/env bash
# Rebuild the vendored three.js bundle that viewer.html inlines (docs/viewing.md):
#   bash build_three.sh [VERSION]
# Fetches three@VERSION with `npm pack` (registry tarball, integrity checked by npm), bundles
# the classes viewer.py uses into one minified classic script exposing `THREE` (esbuild),
# and rewrites THREE_VERSION / three.min.js / THREE_LICENSE. Commit all three files; the
# sha256 goes into README.md. Nothing is fetched when a viewer is written or opened.
set -euo pipefail
VERSION="${1:-0.187.0}"
ESBUILD_VERSION="0.28.2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
npm pack --silent "three@$VERSION" >/dev/null
tar xzf "three-$VERSION.tgz"
npm install --silent --no-save --prefix "$WORK/tools" "esbuild@$ESBUILD_VERSION" >/dev/null
cat > entry.js <<'JS'
export { BufferAttribute, BufferGeometry, Group, PerspectiveCamera, Points, PointsMaterial,
         Scene, Spherical, Vector3, WebGLRenderer } from "./package/build/three.module.js";
JS
"$WORK/tools/node_modules/.bin/esbuild" entry.js --bundle --minify --format=iife \
  --global-name=THREE --legal-comments=none --outfile=bundle.js --log-level=warning
{
  echo "/* three.js $VERSION (https://threejs.org), MIT License (THREE_LICENSE); the classes"
  echo "   k4d_embedded/viewer.py uses, bundled by build_three.sh with esbuild $ESBUILD_VERSION */"
  cat bundle.js
} > "$HERE/three.min.js"
cp package/LICENSE "$HERE/THREE_LICENSE"
echo "$VERSION" > "$HERE/THREE_VERSION"
sha256sum "$HERE/three.min.js"
