#!/usr/bin/env bash
# The Windows client end to end under Wine (tests/it/windows.rs): the
# per-user setup and the per-machine MSI that build.sh made, installed
# silently with an invite code into a fresh Wine prefix, against a Linux
# server on loopback; the setup's client takes part in a polite round beside
# a Linux client, its results validate and the export equals the truth; the
# page's API pauses and resumes it; it is installed again over itself, and
# uninstalled while it scans. The last line says what was checked.
#
#   deploy/windows/build.sh && deploy/windows/wine-e2e.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
export WINEPREFIX="$WIN_ROOT/target/wine-e2e-prefix"
source "$(dirname "$0")/wine.sh"
win_install_missing
version=$(cd "$WIN_ROOT" && cargo pkgid -p beebot-client | sed 's/.*[@#]//')
for f in "beebot-setup-$version.exe" "beebot-$version.msi"; do
    [ -f "$WIN_OUT/$f" ] || win_fail "no $WIN_OUT/$f: run deploy/windows/build.sh first"
done

"$WINESERVER" -k 2>/dev/null || true
rm -rf "$WINEPREFIX"
wine_prefix
summary="$WIN_ROOT/target/wine-e2e-summary.txt"
rm -f "$summary"
echo "== cargo test --workspace --test it windows:: -- --ignored (under Wine and Xvfb)"
BEEBOT_WINE="$WINE" BEEBOT_WINDOWS_DIR="$WIN_OUT" BEEBOT_E2E_SUMMARY="$summary" \
    xvfb-run -a -s "-screen 0 1280x800x24" \
    cargo test --locked --workspace --test it windows:: -- --ignored --test-threads 1
"$WINESERVER" -k 2>/dev/null || true
echo "wine-e2e checked:"
sed 's/^/  - /' "$summary"
echo "wine-e2e: $(wc -l <"$summary") checks passed: the installed Windows client (per-user setup and per-machine MSI) under Wine, a polite validated round beside a Linux client with the export equal to the truth, pause and resume through its page, reinstall over itself, uninstall while scanning, a close asked by taskkill"
