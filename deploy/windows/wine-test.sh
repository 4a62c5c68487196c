#!/usr/bin/env bash
# The unit tests of the crates the Windows client is made of (beebot-shared,
# beebot-client, beebot-win32), built for Windows and run under Wine.
#
#   deploy/windows/wine-test.sh [CARGO TEST ARGS...]
#
# Installs the Debian packages it needs when missing (env.sh); Wine's
# quirks are handled in wine.sh.
set -euo pipefail
source "$(dirname "$0")/env.sh"
source "$(dirname "$0")/wine.sh"
win_install_missing
wine_prefix

# Under a virtual display (Xvfb), as a desktop has one: the
# notification-area icon's test needs the shell's notification area. In
# the release profile, as shipped: build.sh's compiled dependencies serve
# (the Linux tests keep the debug assertions).
echo "== cargo test (Windows, under Wine and Xvfb) -p beebot-win32 -p beebot-shared -p beebot-client"
"$WINESERVER" -k 2>/dev/null || true
CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER="$WIN_ROOT/deploy/windows/wine-runner" \
    xvfb-run -a -s "-screen 0 1280x800x24" \
    bash -c 'source "$0"; win_cargo test --release -p beebot-win32 -p beebot-shared -p beebot-client "$@"' \
    "$WIN_ROOT/deploy/windows/env.sh" "$@"
"$WINESERVER" -k 2>/dev/null || true
