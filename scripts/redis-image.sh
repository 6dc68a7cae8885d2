#!/usr/bin/env bash
# Builds a local Redis image from Debian's redis-server, for machines whose
# Docker cannot pull (no registry). The image holds redis-server, redis-cli
# (for health checks: `redis-cli ping`), the shared libraries they link and
# nothing else, and runs as the unprivileged user `redis` (uid 999), which
# owns /data. Skips the work when the tag exists and was built by this version
# of the script (label idemgate.redis-image=2); older images are rebuilt.
#
#   scripts/redis-image.sh [TAG]      (default: idemgate/redis:local)
set -euo pipefail
. "$(dirname "$0")/pack-libs.sh"
tag=${1:-${IDEMGATE_REDIS_IMAGE:-idemgate/redis:local}}
if [ "$(docker image inspect -f '{{index .Config.Labels "idemgate.redis-image"}}' "$tag" 2>/dev/null)" = "2" ]; then
  echo "redis image $tag: present"
  exit 0
fi
server=$(command -v redis-server) || { echo "redis-server not installed (apt-get install redis-server)" >&2; exit 1; }
cli=$(command -v redis-cli) || { echo "redis-cli not installed (apt-get install redis-tools)" >&2; exit 1; }
server=$(readlink -f "$server")
cli=$(readlink -f "$cli")
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/tmp" "$ctx/root/etc" "$ctx/data"
cp "$server" "$ctx/root/usr/local/bin/redis-server"
cp "$cli" "$ctx/root/usr/local/bin/redis-cli"
pack_libs "$ctx/root" "$server" "$cli"
echo 'redis:x:999:999::/data:/nonexistent' > "$ctx/root/etc/passwd"
echo 'redis:x:999:' > "$ctx/root/etc/group"
chmod 1777 "$ctx/root/tmp"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY root/ /
# A named volume mounted on /data starts as a copy of this directory, owner included.
COPY --chown=999:999 data/ /data/
USER 999:999
# idemgate.redis-cli: what older versions of this script look for (so they keep this image).
LABEL idemgate.redis-cli="1" idemgate.redis-image="2"
ENV PATH=/usr/local/bin
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-server"]
CMD ["--bind", "0.0.0.0", "--protected-mode", "no"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null
echo "redis image $tag: built from $server and $cli"
