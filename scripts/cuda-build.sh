#!/usr/bin/env bash
# Builds, on a machine without a GPU, everything scripts/cuda-tests.sh runs on one: the glint
# binary and the CUDA test binaries (glint-cuda's own tests, the model tests' ::cuda
# variants, glint-tp's NCCL tests), stripped into device-bin/ (git-ignored; small enough to
# carry to a GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf device-bin && mkdir -p device-bin/tests
cargo build --release -p glint-cli --features cuda
strip -o device-bin/glint target/release/glint
cargo test --release --features cuda -p glint-cuda -p glm5-model -p glint-tp --no-run --message-format=json \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        pkg = m["package_id"].split("#")[0].rsplit("/", 1)[-1].split("@")[0]
        print(pkg, m["target"]["name"], m["executable"])
' | while read -r pkg name exe; do
    strip -o "device-bin/tests/$pkg--$name" "$exe"
  done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > device-bin/COMMIT
ls -la device-bin device-bin/tests
du -sh device-bin
