#!/usr/bin/env bash
# Builds a local idemgate image without any registry (for machines whose
# Docker cannot pull; the repo's Dockerfile is the normal build for users):
# `cargo build --release`, then the binary, the shared libraries it links,
# Debian's dash as /bin/sh (so a worker's handler can run `sh -c …`) and
# Debian's CA bundle (the system roots for rediss://), packed into a FROM
# scratch image.
#
#   scripts/idemgate-image.sh [TAG]      (default: idemgate/idemgate:local)
#
# Always rebuilds (the binary changes with the code); cargo's incremental
# build keeps that quick.
set -euo pipefail
. "$(dirname "$0")/pack-libs.sh"
tag=${1:-idemgate/idemgate:local}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --locked --bin idemgate
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target/release/idemgate"
sh_bin=$(readlink -f "$(command -v dash)") || { echo "dash not installed (apt-get install dash)" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/bin" "$ctx/root/tmp" "$ctx/root/etc"
cp "$bin" "$ctx/root/usr/local/bin/idemgate"
cp "$sh_bin" "$ctx/root/bin/sh"
pack_libs "$ctx/root" "$bin" "$sh_bin"
# The system roots, for rediss:// URLs without --redis-tls-ca.
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$ctx/root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/root/etc/ssl/certs/"
fi
chmod 1777 "$ctx/root/tmp"
printf 'root:x:0:0::/:/bin/sh\nnobody:x:65534:65534::/nonexistent:/bin/sh\n' > "$ctx/root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$ctx/root/etc/group"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY root/ /
ENV PATH=/usr/local/bin:/bin
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/idemgate"]
CMD ["serve"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null
echo "idemgate image $tag: built from $bin ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown))"
