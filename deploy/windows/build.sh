#!/usr/bin/env bash
# Build the Windows client and its installers into target/windows/:
#   beebot.exe, beebotw.exe           the client and its windowless launcher
#   beebot-setup-VERSION.exe          per-user setup (NSIS), for a person
#   beebot-VERSION.msi                per-machine MSI (wixl), for IT's deployment
# Any compiler warning for the Windows target fails the build.
#
#   deploy/windows/build.sh                  unsigned
#   deploy/windows/build.sh --sign           signed with the organisation's
#                                            certificate (see sign.sh)
#   deploy/windows/build.sh --sign-throwaway signed with a certificate made
#                                            for the run (CI), then verified
#
# Installs the Debian packages it needs when missing (env.sh).
set -euo pipefail
source "$(dirname "$0")/env.sh"
sign=()
case "${1:-}" in
    "") ;;
    --sign) sign=("$WIN_ROOT/deploy/windows/sign.sh") ;;
    --sign-throwaway) sign=("$WIN_ROOT/deploy/windows/sign.sh" --throwaway) ;;
    *) win_fail "build.sh: unknown option $1 (--sign, --sign-throwaway)" ;;
esac
win_install_missing
version=$(cd "$WIN_ROOT" && cargo pkgid -p beebot-client | sed 's/.*[@#]//')
[ -n "$version" ] || win_fail "cannot read the workspace version"

echo "== cargo build --release -p beebot-client --target $WIN_TARGET"
win_cargo build --release -p beebot-client
rm -rf "$WIN_OUT"
stage="$WIN_OUT/stage"
mkdir -p "$stage"
for exe in beebot.exe beebotw.exe; do
    cp "$WIN_ROOT/target/win-cargo/$WIN_TARGET/release/$exe" "$stage/$exe"
done
cp "$WIN_ROOT/deploy/windows/README.txt" "$stage/README.txt"
# The command line keeps its console; what Windows starts by itself
# (beebotw.exe) opens no console window: their PE subsystems say so.
subsystem() {
    x86_64-w64-mingw32-objdump -p "$stage/$1" | awk '$1 == "Subsystem" { print $2 }'
}
[ "$(subsystem beebot.exe)" = "00000003" ] || win_fail "beebot.exe is not a console program"
[ "$(subsystem beebotw.exe)" = "00000002" ] || win_fail "beebotw.exe is not a windowless (GUI) program"
if [ ${#sign[@]} -gt 0 ]; then
    "${sign[@]}" "$stage/beebot.exe" "$stage/beebotw.exe"
fi
cp "$stage/beebot.exe" "$stage/beebotw.exe" "$WIN_OUT/"

setup="$WIN_OUT/beebot-setup-$version.exe"
echo "== makensis (per-user setup)"
makensis -V2 -WX -DVERSION="$version" -DSRC="$stage" -DOUT="$setup" \
    "$WIN_ROOT/deploy/windows/beebot.nsi" || win_fail "makensis failed"

msi="$WIN_OUT/beebot-$version.msi"
echo "== wixl (per-machine MSI)"
(cd "$stage" && wixl -a x64 -D Version="$version" -D Src=. -o "$msi" \
    "$WIN_ROOT/deploy/windows/beebot.wxs") || win_fail "wixl failed"
[ -f "$msi" ] || win_fail "wixl wrote no $msi"
# INVITE passes from msiexec's command line to the installation proper only
# as a secure property; wixl writes the list itself (its upgrade's).
secure=$(msiinfo export "$msi" Property | awk -F'\t' '$1 == "SecureCustomProperties" { print $2 }')
msibuild "$msi" -q "UPDATE Property SET Value = 'INVITE;$secure' WHERE Property = 'SecureCustomProperties'" ||
    win_fail "cannot mark INVITE secure in $msi"
# Custom-action bits wixl does not write: CheckInvite's command line (it
# holds the code) is kept out of the log (msidbCustomActionTypeHideTarget,
# 0x2000); LeaveProject runs as the user on Terminal Server hosts too
# (msidbCustomActionTypeTSAware, 0x4000).
ca_type() {
    msiinfo export "$msi" CustomAction | awk -F'\t' -v a="$1" '$1 == a { print $2 }'
}
add_ca_bits() {
    local action=$1 bits=$2 type
    type=$(ca_type "$action")
    [ -n "$type" ] || win_fail "no custom action $action in $msi"
    msibuild "$msi" -q "UPDATE CustomAction SET Type = $((type | bits)) WHERE Action = '$action'" ||
        win_fail "cannot set the type of $action in $msi"
    [ "$(ca_type "$action")" = "$((type | bits))" ] || win_fail "$action's type did not take in $msi"
}
add_ca_bits CheckInvite 0x2000
add_ca_bits LeaveProject 0x4000

if [ ${#sign[@]} -gt 0 ]; then
    "${sign[@]}" "$setup" "$msi"
fi
rm -rf "$stage"
for f in beebot.exe beebotw.exe "$(basename "$setup")" "$(basename "$msi")"; do
    printf '%-28s %10d bytes\n' "$f" "$(stat -c %s "$WIN_OUT/$f")"
done
