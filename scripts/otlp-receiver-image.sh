#!/usr/bin/env bash
# Builds the compose test's OTLP receiver image (examples/otlp_receiver.rs,
# the stand-in for the OpenTelemetry Collector: no collector image can be
# pulled where the tests run, and Debian packages none) without any
# registry: the example built here, the shared libraries it links, packed
# into a FROM scratch image. tests/compose.sh runs it as the `otel-collector`
# service of tests/compose.otel.yml.
#
#   scripts/otlp-receiver-image.sh [TAG]    (default: idemgate/otlp-receiver:local)
#
# The example builds with the tests' feature set (its dependencies are the
# tests' own: opentelemetry-proto, prost), so it reuses their build.
set -euo pipefail
. "$(dirname "$0")/pack-libs.sh"
tag=${1:-idemgate/otlp-receiver:local}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --locked --features test-full --example otlp_receiver
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target/debug/examples/otlp_receiver"
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/etc"
cp "$bin" "$ctx/root/usr/local/bin/otlp-receiver"
pack_libs "$ctx/root" "$bin"
printf 'root:x:0:0::/:/nonexistent\nnobody:x:65534:65534::/nonexistent:/nonexistent\n' > "$ctx/root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$ctx/root/etc/group"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY root/ /
USER 65534:65534
EXPOSE 4318
ENTRYPOINT ["/usr/local/bin/otlp-receiver"]
CMD ["--listen", "0.0.0.0:4318"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$ctx" >/dev/null
echo "otlp receiver image $tag: built from $bin"
