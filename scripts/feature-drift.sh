#!/usr/bin/env bash
# Does the root package `glint` resolve every dependency with the same features as the whole
# workspace? If not, `cargo run --release --example generate` after `cargo test --workspace
# --release` recompiles the crates that differ and everything above them (three minutes in CI).
# Prints each crate whose features differ and exits 1; the fix is a line in the root
# Cargo.toml's feature-unification block.
set -euo pipefail
cd "$(dirname "$0")/.."
tree() { cargo tree -q "$@" -e normal,dev,build -f '{p} {f}' --prefix none; }
python3 - <(tree --workspace) <(tree -p glint) <<'PY'
import sys

def load(path):
    feats = {}
    for line in open(path):
        words = line.replace("(*)", "").replace("(proc-macro)", "").split()
        if len(words) < 2:
            continue
        rest = [w for w in words[2:] if not w.startswith("(")]
        feats.setdefault(" ".join(words[:2]), set()).update(rest[-1].split(",") if rest else [])
    return feats

workspace, root = load(sys.argv[1]), load(sys.argv[2])
drift = [(k, sorted(workspace.get(k, set()) - f)) for k, f in sorted(root.items())]
drift = [(k, missing) for k, missing in drift if missing]
for k, missing in drift:
    print(f"feature drift: {k} lacks {','.join(missing)} under `-p glint`")
if drift:
    sys.exit(1)
print(f"no feature drift: the {len(root)} crates under `glint` resolve as in the workspace")
PY
