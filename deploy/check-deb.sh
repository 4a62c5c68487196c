#!/usr/bin/env bash
# Build the beebot-server Debian package and check it: its control fields,
# its files, its maintainer scripts, and that the binary it installs runs
# and is this workspace's version. CI runs it after the tests; by hand:
#   deploy/check-deb.sh            (build, then check)
#   deploy/check-deb.sh FILE.deb   (check a package already built)
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

if [ $# -ge 1 ]; then
    deb=$1
else
    if ! cargo deb --version >/dev/null 2>&1; then
        echo "== cargo install cargo-deb --version 3.8.0 --locked"
        cargo install cargo-deb --version 3.8.0 --locked
    fi
    echo "== cargo deb -p beebot-server --locked"
    deb=$(cargo deb -p beebot-server --locked | tail -n 1)
fi
[ -f "$deb" ] || fail "no package at '$deb'"
echo "== checking $deb ($(stat -c %s "$deb") bytes)"

info=$(dpkg-deb --info "$deb")
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

# Install into a throwaway root with dpkg itself (unpack: files and dpkg's
# database; the scripts that add a user are not run there), or, where dpkg
# refuses, extract the archive.
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
if dpkg --root="$root" --force-not-root --force-script-chrootless \
    --log=/dev/null --unpack "$deb" >"$work/dpkg.log" 2>&1; then
    dpkg --root="$root" -s beebot-server | grep -qx "Status: install ok unpacked" \
        || fail "dpkg --root did not record beebot-server as unpacked"
    echo "installed with dpkg --root $root --unpack"
else
    echo "dpkg --root refused ($(tail -n 1 "$work/dpkg.log")); extracting with dpkg-deb -x"
    dpkg-deb -x "$deb" "$root"
fi
cmp -s "$root/usr/lib/systemd/system/beebot-server.service" deploy/beebot-server.service \
    || fail "the packaged unit differs from deploy/beebot-server.service"
said=$("$root/usr/bin/beebot-server" --version) || fail "the installed binary does not run"
[ "$said" = "beebot-server $version" ] \
    || fail "the installed binary says '$said', want 'beebot-server $version'"
echo "ok: $deb installs /usr/bin/beebot-server ($said), its unit, config example and scripts"
