#!/usr/bin/env bash
# Builds the release test binaries and the `kiln` binary and copies them, stripped and named by
# test, into DIR, with the test data they read at run time in DIR/data (the tests look there
# when the source tree they were built from is absent), for a GPU machine that has no Rust
# toolchain (run them there with scripts/gpu-tests.sh DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir="${1:?usage: scripts/collect-test-binaries.sh DIR}"
mkdir -p "$dir"
cargo build --release --locked -p kiln-cli
# Compiler messages go to stderr; the JSON on stdout names each test executable.
cargo test --release --locked -p kiln --no-run --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do cp "$exe" "$dir/$name"; done
cp "${CARGO_TARGET_DIR:-target}/release/kiln" "$dir/kiln"
find "$dir" -maxdepth 1 -type f -exec strip {} + 2>/dev/null || true
rm -rf "$dir/data"
mkdir -p "$dir/data"
cp -r crates/kiln/tests/golden "$dir/data/golden"
ls "$dir"
