# Sourced by the image scripts: copies the dynamic loader and every shared
# library the given binaries link into ROOT, at their own paths, so the
# binaries run in a FROM scratch image.
#
#   pack_libs ROOT BINARY…
pack_libs() {
  local root=$1 lib
  shift
  for lib in $(for b in "$@"; do ldd "$b"; done | grep -oE '/[^ ]+' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
