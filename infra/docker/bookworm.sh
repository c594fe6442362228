#!/usr/bin/env bash
# The Debian bookworm base of the stand-in images (python.Dockerfile, kafka.Dockerfile): a minimal
# root file system from Debian's packages, made by debootstrap and imported into Docker. Kept in
# the engine's image store: made again only when the image is missing or this script changed.
#
#   infra/docker/bookworm.sh [IMAGE]     # default hastream-standin/bookworm
set -euo pipefail
image="${1:-hastream-standin/bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
made_by="$(sha256sum "$0" | cut -c1-16)"   # the label that says which version of this script made it

if [ "$(docker image inspect -f '{{index .Config.Labels "org.hastream.standin"}}' "$image" 2>/dev/null)" = "$made_by" ]; then
  exit 0
fi
command -v debootstrap >/dev/null || { echo "bookworm.sh: error: debootstrap is needed (infra/docker/engine.sh install)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "bookworm.sh: debootstrap of Debian bookworm into $work (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$work/fs" "$mirror" \
  > "$work/debootstrap.log" 2>&1 || { tail -n 5 "$work/debootstrap.log" >&2; exit 1; }
# The suites Debian's own images list, so an image built on it gets the same updates.
cat > "$work/fs/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SOURCES
rm -rf "$work/fs/var/cache/apt/archives/"*.deb "$work/fs/var/lib/apt/lists/"*
tar -C "$work/fs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL org.hastream.standin=$made_by" \
  --change 'CMD ["bash"]' - "$image" > /dev/null
echo "bookworm.sh: imported $image"
