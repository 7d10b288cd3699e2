#!/usr/bin/env bash
# Install Debian's Chromium for the browser test (tests/ui) and scripts/ui_screenshots.py.
# Idempotent: if the browser already runs, nothing is done.
#
# Playwright drives it by its executable path (AUTOTUNE_CHROMIUM, default /usr/bin/chromium);
# `playwright install` is never used: it downloads its own browser build from the internet.
#
# Usage: scripts/install_chromium.sh   (needs root, or sudo, for apt-get)
set -euo pipefail

chromium="${AUTOTUNE_CHROMIUM:-/usr/bin/chromium}"

works() {
  # The Debian wrapper prints a harmless "[: unexpected operator" on stderr; the version line
  # on stdout is what says the browser starts.
  "${chromium}" --version 2>/dev/null | grep -q Chromium
}

if [[ -x "${chromium}" ]] && works; then
  echo "$("${chromium}" --version 2>/dev/null) already installed at ${chromium}"
  exit 0
fi

sudo_cmd=()
if [[ "$(id -u)" != 0 ]]; then
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q chromium
works || { echo "error: ${chromium} does not start after installing Debian's chromium" >&2; exit 1; }
echo "installed $("${chromium}" --version 2>/dev/null) at ${chromium}"
