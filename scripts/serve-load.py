"""Concurrent streaming completions against a running `glint serve` (standard library only, so
it runs on a GPU machine with no network): CONCURRENCY client threads send REQUESTS requests in
all, each asking for MAX_TOKENS tokens with ignore_eos, and the script prints output tokens/s,
latency and time-to-first-token percentiles, and errors, as a Markdown table row.

    python3 scripts/serve-load.py URL CONCURRENCY REQUESTS MAX_TOKENS [PROMPT]
"""
import http.client
import json
import sys
import threading
import time
import urllib.parse


def one(url, body, results, lock):
    u = urllib.parse.urlparse(url)
    start = time.perf_counter()
    first = None
    tokens = 0
    err = None
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"content-type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            err = f"HTTP {resp.status}: {resp.read()[:200]!r}"
        else:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                msg = json.loads(line[6:])
                if msg.get("choices") and msg["choices"][0].get("text"):
                    first = first or time.perf_counter()
                if msg.get("usage"):
                    tokens = msg["usage"]["completion_tokens"]
        conn.close()
    except Exception as e:  # counted and reported, never fatal for the run
        err = repr(e)
    end = time.perf_counter()
    with lock:
        results.append((start, first, end, tokens, err))


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")


def main():
    url, conc, total, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    prompt = sys.argv[5] if len(sys.argv) > 5 else "The history of the city begins"
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    results, lock, queue = [], threading.Lock(), list(range(total))

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                queue.pop()
            one(url, body, results, lock)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[4] is None]
    errors = [r[4] for r in results if r[4] is not None]
    out_tokens = sum(r[3] for r in ok)
    lat = [r[2] - r[0] for r in ok]
    ttft = [r[1] - r[0] for r in ok if r[1] is not None]
    print("| concurrency | requests | max_tokens | output tok/s | P50 latency s | P99 latency s | "
          "P50 TTFT s | P99 TTFT s | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {conc} | {total} | {max_tokens} | {out_tokens / wall:.1f} | {pct(lat, 50):.2f} | "
          f"{pct(lat, 99):.2f} | {pct(ttft, 50):.3f} | {pct(ttft, 99):.3f} | {len(errors)} |")
    for e in errors[:5]:
        print("error:", e)


if __name__ == "__main__":
    main()
