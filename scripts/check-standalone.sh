#!/usr/bin/env bash
# Fails when a tracked file refers to material outside this repository: a
# path into a sibling `shared` folder, or the private specification by its
# name. The repository must build, test and explain itself when cloned alone;
# docs/reference.md is the reference to cite instead.
#
#   scripts/check-standalone.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Spelled in pieces so that this script does not match itself.
spec_name="CONT""RACT"
pattern="\.\./shared|${spec_name}"
if hits=$(git grep -n -I -E "$pattern" -- . 2>/dev/null); then
  echo "check-standalone: tracked files refer to material outside the repository:" >&2
  echo "$hits" | cut -c1-200 >&2
  echo "cite docs/reference.md (or state the rule) instead" >&2
  exit 1
fi
echo "check-standalone: ok (no tracked file refers to material outside the repository)"
