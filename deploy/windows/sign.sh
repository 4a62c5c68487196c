#!/usr/bin/env bash
# Authenticode-sign Windows files in place with osslsigncode, then verify
# each signature against the signing certificate.
#
#   deploy/windows/sign.sh FILE...          the organisation's certificate:
#       BEEBOT_SIGN_PKCS12=cert.p12         its PKCS#12 file (certificate,
#                                           chain and key), and
#       BEEBOT_SIGN_PASSWORD_FILE=pass.txt  the file holding its password;
#       BEEBOT_SIGN_TIMESTAMP=URL           a timestamp server (optional: a
#                                           signature without one stops being
#                                           valid when the certificate expires)
#   deploy/windows/sign.sh --throwaway FILE...
#       a certificate made for this run alone (CI): proves the files can be
#       signed and the signatures verify, trusted by nobody.
set -euo pipefail
source "$(dirname "$0")/env.sh"
command -v osslsigncode >/dev/null || win_fail "no osslsigncode: apt-get install -t bookworm-backports osslsigncode"

throwaway=0
if [ "${1:-}" = "--throwaway" ]; then
    throwaway=1
    shift
fi
[ $# -gt 0 ] || win_fail "sign.sh: name the files to sign"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ $throwaway -eq 1 ]; then
    openssl req -x509 -newkey rsa:3072 -sha256 -days 2 -nodes -batch \
        -subj "/CN=BeeBot grid throwaway code signing/O=BeeBot grid" \
        -addext "extendedKeyUsage=codeSigning" -addext "keyUsage=digitalSignature" \
        -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null ||
        win_fail "cannot make a throwaway certificate"
    printf 'throwaway\n' >"$work/pass"
    openssl pkcs12 -export -inkey "$work/key.pem" -in "$work/cert.pem" \
        -passout file:"$work/pass" -out "$work/cert.p12" ||
        win_fail "cannot pack the throwaway certificate"
    pkcs12="$work/cert.p12"
    passfile="$work/pass"
else
    pkcs12=${BEEBOT_SIGN_PKCS12:?set BEEBOT_SIGN_PKCS12 to the organisation\'s PKCS#12 file, or pass --throwaway}
    passfile=${BEEBOT_SIGN_PASSWORD_FILE:?set BEEBOT_SIGN_PASSWORD_FILE to the file holding its password}
    [ -r "$pkcs12" ] || win_fail "cannot read $pkcs12"
    [ -r "$passfile" ] || win_fail "cannot read $passfile"
fi
# The certificate alone, for verifying.
openssl pkcs12 -in "$pkcs12" -passin file:"$passfile" -nokeys -clcerts -out "$work/signer.pem" 2>/dev/null ||
    openssl pkcs12 -legacy -in "$pkcs12" -passin file:"$passfile" -nokeys -clcerts -out "$work/signer.pem" ||
    win_fail "cannot read the certificate in $pkcs12 (wrong password?)"
openssl pkcs12 -in "$pkcs12" -passin file:"$passfile" -nokeys -cacerts -out "$work/chain.pem" 2>/dev/null || true
cat "$work/signer.pem" "$work/chain.pem" >"$work/trust.pem"

for f in "$@"; do
    [ -f "$f" ] || win_fail "no file $f to sign"
    args=(sign -pkcs12 "$pkcs12" -readpass "$passfile" -h sha256
        -n "BeeBot grid client" -i "https://example.invalid/beebot-grid")
    if [ -n "${BEEBOT_SIGN_TIMESTAMP:-}" ]; then
        args+=(-ts "$BEEBOT_SIGN_TIMESTAMP")
    fi
    osslsigncode "${args[@]}" -in "$f" -out "$f.signed" >/dev/null ||
        { rm -f "$f.signed"; win_fail "cannot sign $f"; }
    mv "$f.signed" "$f"
    out=$(osslsigncode verify -CAfile "$work/trust.pem" -in "$f" 2>&1) ||
        win_fail "the signature of $f does not verify: $out"
    grep -q "Signature verification: ok" <<<"$out" ||
        win_fail "the signature of $f does not verify: $out"
    subject=$(grep -m1 -i "Subject:" <<<"$out" | sed 's/^[[:space:]]*//')
    echo "signed and verified $(basename "$f") ($subject)"
done
