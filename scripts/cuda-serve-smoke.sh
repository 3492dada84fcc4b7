#!/usr/bin/env bash
# On a GPU machine (checkout with device-bin/): `glint serve --device cuda` on the tiny fixture
# answers a greedy completion with the text `glint generate --device cuda` prints for the same
# prompt, streamed and not. Exit status 0 when all agree.
set -uo pipefail
cd "$(dirname "$0")/.."
G=device-bin/glint
M=fixtures/glm5/glm5-tiny-f32.gguf
P="The capital of France is"
port=18123
$G serve -m "$M" --port $port --device cuda > /tmp/serve.log 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf localhost:$port/health > /dev/null && break; sleep 0.2; done
want=$($G generate -m "$M" -p "$P" -n 16 --temp 0 --device cuda 2>/dev/null)
body='{"model":"glm5-tiny-f32","prompt":"'"$P"'","max_tokens":16,"temperature":0}'
got=$(curl -sf localhost:$port/v1/completions -H 'content-type: application/json' -d "$body" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"], end="")')
sbody='{"model":"glm5-tiny-f32","prompt":"'"$P"'","max_tokens":16,"temperature":0,"stream":true}'
streamed=$(curl -sfN localhost:$port/v1/completions -H 'content-type: application/json' -d "$sbody" |
  python3 -c '
import json, sys
out = []
for line in sys.stdin:
    line = line.strip()
    if line.startswith("data: ") and line != "data: [DONE]":
        c = json.loads(line[6:])["choices"]
        if c:
            out.append(c[0]["text"])
print("".join(out), end="")')
kill -TERM $pid; wait $pid
printf 'generate: %q\nserver:   %q\nstreamed: %q\n' "$want" "$P$got" "$P$streamed"
[ "$want" = "$P$got" ] && [ "$want" = "$P$streamed" ] && echo "SERVE_CUDA_SAME"
