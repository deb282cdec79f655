#!/bin/sh
# install-libsdr.sh PREFIX [go build flags...]
#
# Builds libsdr, the SDK's C interface over our backends, as a shared
# library (go build -buildmode=c-shared) and a static one (c-archive), and
# installs under PREFIX:
#   lib/libsdr.so lib/libsdr.a lib/pkgconfig/sdr.pc include/sdr.h
#   include/sdr_mr.h share/sdr/examples/*.c bin/sdr_write_bw bin/sdr_sr
# The example programs are compiled against the installed tree with
# pkg-config, as a user's would be. Extra arguments go to go build (e.g.
# -tags dpa,doca on a BlueField host).
set -eu
[ $# -ge 1 ] || { echo "usage: $0 PREFIX [go build flags...]" >&2; exit 2; }
prefix=$1
shift
case $prefix in /*) ;; *) prefix=$(pwd)/$prefix ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(cd "$root" && git describe --always --dirty 2>/dev/null || echo 0)
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$root" && go build -buildmode=c-shared -o "$tmp/libsdr.so" "$@" ./libsdr)
(cd "$root" && go build -buildmode=c-archive -o "$tmp/libsdr.a" "$@" ./libsdr)

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/bin" "$prefix/share/sdr/examples"
install -m 755 "$tmp/libsdr.so" "$prefix/lib/libsdr.so"
install -m 644 "$tmp/libsdr.a" "$prefix/lib/libsdr.a"
install -m 644 "$root/libsdr/include/sdr.h" "$root/libsdr/include/sdr_mr.h" "$prefix/include/"
install -m 644 "$root"/libsdr/examples/*.c "$prefix/share/sdr/examples/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" "$root/libsdr/sdr.pc.in" > "$prefix/lib/pkgconfig/sdr.pc"

flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs sdr)
# shellcheck disable=SC2086 # flags is a word list
"$cc" -O2 -Wall -Wextra -Werror -o "$prefix/bin/sdr_write_bw" "$root/libsdr/examples/sdr_write_bw.c" $flags
# shellcheck disable=SC2086
"$cc" -O2 -Wall -Wextra -Werror -o "$prefix/bin/sdr_sr" "$root/libsdr/examples/sdr_sr.c" $flags -lpthread
echo "libsdr installed in $prefix: cc prog.c \$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs sdr)"
