#!/bin/sh
# Build a Redis >= 8.2 server (XDELEX / XTRIM ... ACKED) for `make test-redis8`.
# No PyPI wheel bundles Redis 8 and Debian bookworm ships 7.0, so this takes the source
# package from Debian experimental (deb.debian.org) and builds only redis-server (~1 min).
# Usage: tools/build-redis8.sh DEST_DIR   (leaves DEST_DIR/redis-server)
set -eu
DEST=$(realpath -m "${1:?destination directory}")
if [ -x "$DEST/redis-server" ]; then exit 0; fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$DEST"
echo "deb-src http://deb.debian.org/debian experimental main" > "$WORK/sources.list"
APT="-o Dir::Etc::SourceList=$WORK/sources.list -o Dir::Etc::SourceParts=/dev/null \
     -o Dir::State::Lists=$WORK/lists -o Dir::Cache=$WORK/cache -o APT::Sandbox::User=root"
# shellcheck disable=SC2086
apt-get $APT update -qq
cd "$WORK"
# shellcheck disable=SC2086
apt-get $APT source --download-only -qq redis
tar xzf redis_*.orig.tar.gz
make -C redis-*/ -j2 BUILD_TLS=no MALLOC=libc redis-server >"$WORK/build.log" 2>&1 \
  || { tail -30 "$WORK/build.log"; exit 1; }
VERSION=$(redis-*/src/redis-server --version | sed 's/.*v=\([0-9.]*\).*/\1/')
case "$VERSION" in
  [0-7].*|8.[01].*) echo "Debian experimental has Redis $VERSION, not >= 8.2" >&2; exit 1 ;;
esac
cp redis-*/src/redis-server "$DEST/redis-server"
echo "built Redis $VERSION into $DEST"
