#!/usr/bin/env bash
# Builds a local Redis image from Debian's redis-server, for machines whose
# Docker cannot pull (no registry). The image holds the binary, the shared
# libraries it links and nothing else. Skips the work when the tag exists.
#
#   scripts/redis-image.sh [TAG]      (default: idemgate/redis:local)
set -euo pipefail
tag=${1:-${IDEMGATE_REDIS_IMAGE:-idemgate/redis:local}}
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "redis image $tag: present"
  exit 0
fi
bin=$(command -v redis-server) || { echo "redis-server not installed (apt-get install redis-server)" >&2; exit 1; }
bin=$(readlink -f "$bin")
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/data" "$ctx/root/tmp" "$ctx/root/etc"
cp "$bin" "$ctx/root/usr/local/bin/redis-server"
# The dynamic loader and every library the binary links, at their own paths.
for lib in $(ldd "$bin" | grep -oE '/[^ ]+'); do
  mkdir -p "$ctx/root$(dirname "$lib")"
  cp -L "$lib" "$ctx/root$lib"
done
echo 'redis:x:999:999::/data:/nonexistent' > "$ctx/root/etc/passwd"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY root/ /
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-server"]
CMD ["--bind", "0.0.0.0", "--protected-mode", "no"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null
echo "redis image $tag: built from $bin"
