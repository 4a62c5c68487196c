# Sourced by the Windows scripts (build.sh, wine-test.sh, wine-e2e.sh): the
# cross toolchain from Debian's packages and the Cargo settings for
# x86_64-pc-windows-gnu. Not run on its own.
#
# Debian's rustc-web/cargo-web (1.96, in /usr/bin) build std for the target
# from rust-web-src (`-Z build-std`, allowed by RUSTC_BOOTSTRAP=1), linking
# with mingw-w64's gcc: rustup cannot fetch the target's prebuilt std here.
# Its own target directory keeps the host toolchain's builds apart.

WIN_TARGET=x86_64-pc-windows-gnu
WIN_PACKAGES=(rustc-web cargo-web rust-web-src gcc-mingw-w64-x86-64 wine64 wixl msitools nsis osslsigncode xvfb xauth)

win_fail() {
    echo "windows: $*" >&2
    exit 1
}

# win_install_missing: install the Debian packages the scripts need, when
# missing (as root, or through sudo).
win_install_missing() {
    local missing=() p
    for p in "${WIN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "== apt-get install ${missing[*]}"
    $sudo apt-get update -qq
    # osslsigncode is in bookworm-backports on Debian 12.
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" ||
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -t bookworm-backports "${missing[@]}"
}

# win_cargo ARGS...: Debian's cargo for the Windows target, warnings denied.
win_cargo() {
    PATH=/usr/bin:$PATH \
        RUSTC_BOOTSTRAP=1 \
        RUSTFLAGS="-D warnings" \
        CARGO_TARGET_DIR="$WIN_ROOT/target/win-cargo" \
        CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc \
        /usr/bin/cargo "$@" --locked -Z build-std=std,panic_abort --target "$WIN_TARGET"
}

WIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WIN_OUT="$WIN_ROOT/target/windows"
