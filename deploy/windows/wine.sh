# Sourced by what runs the Windows client under Wine (wine-test.sh,
# wine-e2e.sh, the Windows bench): a Wine prefix of the
# repository's own, and Wine 8's quirks handled here, in the harness, never
# in what is shipped.
#
# - Wine 8 has no bcryptprimitives.dll, whose ProcessPrng Rust's std calls
#   first thing, and its sockets refuse two queries quinn-udp makes
#   (IPV6_V6ONLY of an AF_INET socket, IP_RECVECN/IPV6_RECVECN), which
#   Windows answers: wine/wine8-shim.c, built with mingw-w64 as a stand-in
#   bcryptprimitives.dll in the prefix's system32, meets both (see it).
# - Mono and Gecko are not installed into the prefix (no download, no
#   dialog); nothing here needs .NET or an HTML engine.
# Needs env.sh sourced first.

WINE=/usr/lib/wine/wine64
WINESERVER=/usr/lib/wine/wineserver64
export WINEPREFIX="${WINEPREFIX:-$WIN_ROOT/target/wine-prefix}"
export WINEDEBUG="${WINEDEBUG:--all}"
export WINEDLLOVERRIDES="mscoree,mshtml="
export WINEARCH=win64

# wine_prefix: make the prefix when missing and install the stand-in DLL.
wine_prefix() {
    [ -x "$WINE" ] || win_fail "no $WINE: install wine64 (deploy/windows/env.sh)"
    local sys32="$WINEPREFIX/drive_c/windows/system32"
    if [ ! -d "$sys32" ]; then
        echo "== wineboot --init ($WINEPREFIX)"
        "$WINE" wineboot --init >/dev/null 2>&1 || win_fail "wineboot failed for $WINEPREFIX"
        "$WINESERVER" -w
    fi
    local dll="$sys32/bcryptprimitives.dll" src="$WIN_ROOT/deploy/windows/wine"
    if [ ! -f "$dll" ] || [ "$src/wine8-shim.c" -nt "$dll" ]; then
        x86_64-w64-mingw32-gcc -O2 -Wall -Werror -shared -o "$dll" \
            "$src/wine8-shim.c" "$src/bcryptprimitives.def" -ladvapi32 -lws2_32 ||
            win_fail "cannot build the bcryptprimitives.dll stand-in"
    fi
}

# wine_run EXE ARGS...: run a Windows program in the prefix.
wine_run() {
    "$WINE" "$@"
}
