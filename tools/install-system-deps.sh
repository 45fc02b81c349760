#!/usr/bin/env bash
# Debian libraries the Python packages need at run time (no pip wheel ships them):
#   libosmesa6   MuJoCo's offscreen renderer (projection cross-check and benchmark)
#   libegl1      MuJoCo/Open3D GL loading
#   libusb-1.0-0 Open3D's import
#   chromium     only with --browser: the viewer's headless-browser test (CI installs it)
# Idempotent; needs root and apt-get (CI runs as root).
set -euo pipefail
needed=()
packages=(libosmesa6 libegl1 libusb-1.0-0)
[ "${1:-}" = "--browser" ] && packages+=(chromium)
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || needed+=("$pkg")
done
[ ${#needed[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-system-deps: missing ${needed[*]}; install them with apt-get as root" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${needed[@]}" >/dev/null
echo "install-system-deps: installed ${needed[*]}"
