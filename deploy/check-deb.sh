#!/usr/bin/env bash
# Build the Debian packages and check them: the server's (beebot-server)
# and the desktop client's (beebot): control fields, files, maintainer
# scripts, and that the binary each installs runs and is this workspace's
# version. CI runs it after the tests; by hand:
#   deploy/check-deb.sh                       (build both, then check)
#   deploy/check-deb.sh SERVER.deb CLIENT.deb (check packages already built)
# Installs cargo-deb when missing. Any mismatch fails with a message.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
    echo "check-deb: $*" >&2
    exit 1
}

# The workspace version, e.g. 0.1.0 (pkgid ends in `#beebot-server@0.1.0`).
version=$(cargo pkgid -p beebot-server | sed 's/.*[@#]//')
[ -n "$version" ] || fail "cannot read the workspace version"

if [ $# -ge 2 ]; then
    deb=$1
    client_deb=$2
else
    if ! cargo deb --version >/dev/null 2>&1; then
        echo "== cargo install cargo-deb --version 3.8.0 --locked"
        cargo install cargo-deb --version 3.8.0 --locked
    fi
    echo "== cargo deb -p beebot-server --locked"
    deb=$(cargo deb -p beebot-server --locked | tail -n 1)
    echo "== cargo deb -p beebot-client --locked"
    client_deb=$(cargo deb -p beebot-client --locked | tail -n 1)
fi
[ -f "$deb" ] || fail "no package at '$deb'"
echo "== checking $deb ($(stat -c %s "$deb") bytes)"

info=$(dpkg-deb --info "$deb")
# want_field PATTERN: the control file of the package in $info has it.
want_field() {
    grep -qxE " $1" <<<"$info" || fail "control has no line matching '$1':
$info"
}
want_field "Package: beebot-server"
want_field "Version: ${version//./\\.}(-[0-9]+)?"
want_field "Architecture: [a-z0-9]+"
want_field "Section: net"
want_field "Priority: optional"
want_field "Depends: .*adduser.*"
want_field "Depends: .*libc6.*"
for script in postinst postrm prerm; do
    grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\* +$script " <<<"$info" \
        || fail "no executable $script in the control archive:
$info"
done

contents=$(dpkg-deb --contents "$deb")
# want_file PATH: the package in $contents has it, owned by root.
want_file() {
    grep -qE "^-[rwx-]{9} (root/root|0/0) .* \./$1$" <<<"$contents" \
        || fail "the package has no file $1 owned by root:
$contents"
}
want_file "usr/bin/beebot-server"
want_file "usr/lib/systemd/system/beebot-server.service"
want_file "usr/share/doc/beebot-server/server.example.toml"
want_file "usr/share/doc/beebot-server/README.md"
want_file "usr/share/doc/beebot-server/copyright"
grep -qE "^-rwxr-xr-x .* \./usr/bin/beebot-server$" <<<"$contents" \
    || fail "usr/bin/beebot-server is not mode 0755"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# unpack DEB ROOT PACKAGE: install into a throwaway root with dpkg itself
# (files and dpkg's database; the maintainer scripts are not run there),
# or, where dpkg refuses, extract the archive.
unpack() {
    mkdir -p "$2/var/lib/dpkg/info" "$2/var/lib/dpkg/updates"
    touch "$2/var/lib/dpkg/status"
    if dpkg --root="$2" --force-not-root --force-script-chrootless \
        --log=/dev/null --unpack "$1" >"$work/dpkg.log" 2>&1; then
        dpkg --root="$2" -s "$3" | grep -qx "Status: install ok unpacked" \
            || fail "dpkg --root did not record $3 as unpacked"
        echo "installed with dpkg --root $2 --unpack"
    else
        echo "dpkg --root refused ($(tail -n 1 "$work/dpkg.log")); extracting with dpkg-deb -x"
        dpkg-deb -x "$1" "$2"
    fi
}

# The maintainer scripts: ours, with the systemd snippets cargo-deb adds.
dpkg-deb --control "$deb" "$work/control"
grep -q "adduser --system --group --home \"\$DATA_DIR\"" "$work/control/postinst" \
    || fail "postinst does not create the system user"
grep -q "deb-systemd-helper" "$work/control/postinst" \
    || fail "postinst does not enable the unit"
if grep -qE 'deb-systemd-invoke (start|restart|"?\$_dh_action)' "$work/control/postinst"; then
    fail "postinst starts the unit before 'beebot-server init'"
fi
grep -q 'rm -rf "$DATA_DIR"' "$work/control/postrm" \
    || fail "postrm does not remove the data dir on purge"
for s in postinst postrm prerm; do
    sh -n "$work/control/$s" || fail "$s is not valid sh"
done

root=$work/root
unpack "$deb" "$root" beebot-server
cmp -s "$root/usr/lib/systemd/system/beebot-server.service" deploy/beebot-server.service \
    || fail "the packaged unit differs from deploy/beebot-server.service"
said=$("$root/usr/bin/beebot-server" --version) || fail "the installed binary does not run"
[ "$said" = "beebot-server $version" ] \
    || fail "the installed binary says '$said', want 'beebot-server $version'"
echo "ok: $deb installs /usr/bin/beebot-server ($said), its unit, config example and scripts"

# The desktop client: its binary, the user unit every login starts, the
# menu entry that opens the status page, its icon, and scripts that enable
# the unit for every user and keep a silent install's invite code.
deb=$client_deb
[ -f "$deb" ] || fail "no package at '$deb'"
echo "== checking $deb ($(stat -c %s "$deb") bytes)"
info=$(dpkg-deb --info "$deb")
want_field "Package: beebot"
want_field "Version: ${version//./\\.}(-[0-9]+)?"
want_field "Section: net"
want_field "Depends: .*libc6.*"
contents=$(dpkg-deb --contents "$deb")
want_file "usr/bin/beebot"
want_file "usr/lib/systemd/user/beebot.service"
want_file "usr/share/applications/beebot.desktop"
want_file "usr/share/icons/hicolor/scalable/apps/beebot.svg"
want_file "usr/share/doc/beebot/README.md"
grep -qE "^-rwxr-xr-x .* \./usr/bin/beebot$" <<<"$contents" \
    || fail "usr/bin/beebot is not mode 0755"
dpkg-deb --control "$deb" "$work/client-control"
grep -q "systemctl --global enable beebot.service" "$work/client-control/postinst" \
    || fail "postinst does not start the client at every login"
grep -q "BEEBOT_INVITE" "$work/client-control/postinst" \
    || fail "postinst does not keep a silent install's invite code"
grep -q "systemctl --global disable beebot.service" "$work/client-control/prerm" \
    || fail "prerm does not stop starting the client at login"
for s in postinst postrm prerm; do
    sh -n "$work/client-control/$s" || fail "client $s is not valid sh"
done
# The postinst keeps the invite where the client looks (a root of our own).
croot=$work/client-root
unpack "$deb" "$croot" beebot
sed "s|/etc/beebot|$croot/etc/beebot|g; s|systemctl|true|g" "$work/client-control/postinst" \
    >"$work/postinst.test"
BEEBOT_INVITE=beebot2-test sh "$work/postinst.test" configure 2>/dev/null
[ "$(cat "$croot/etc/beebot/invite")" = beebot2-test ] \
    || fail "postinst did not write BEEBOT_INVITE to /etc/beebot/invite"
cmp -s "$croot/usr/lib/systemd/user/beebot.service" deploy/client-deb/beebot.service \
    || fail "the packaged user unit differs from deploy/client-deb/beebot.service"
grep -qx "Exec=/usr/bin/beebot open" "$croot/usr/share/applications/beebot.desktop" \
    || fail "the menu entry does not run 'beebot open'"
command -v desktop-file-validate >/dev/null 2>&1 \
    || fail "desktop-file-validate is missing (Debian's desktop-file-utils): .ci/run installs it"
desktop-file-validate "$croot/usr/share/applications/beebot.desktop" \
    || fail "the menu entry is not a valid desktop entry"
said=$("$croot/usr/bin/beebot" --version) || fail "the installed client does not run"
[ "$said" = "beebot $version" ] \
    || fail "the installed client says '$said', want 'beebot $version'"
echo "ok: $deb installs /usr/bin/beebot ($said), its user unit, menu entry, icon and scripts"
