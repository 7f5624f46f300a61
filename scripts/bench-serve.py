#!/usr/bin/env python3
"""In-flight batching as clients see it: `flashspec serve --parallel N` under load.

    scripts/bench-serve.py [--clients 1,4,8] [--requests 2] [--max-tokens 64] [--join]
                           [--cgroup NAME] [--flashspec PATH] -- SERVE ARGS...

For each client count N it starts `flashspec serve --parallel N SERVE ARGS` (in the cgroup
v1 memory group NAME when given: /sys/fs/cgroup/memory/NAME), lets N clients send
--requests greedy completions each at once, and reports their aggregate tokens/s, the
ratio to the first count's, and whether every answer equals the one the same prompt got
in the other runs. --join measures a request arriving while three others stream (server
at --parallel 4): its time to first token against the same kind of prompt alone, and the
others' gaps between tokens before and during its prefill. One JSON line per
measurement on stdout. Example (the 1B-shape target streamed under a 320 MB cap):

    scripts/bench-serve.py --cgroup fs320 --join -- -m tl1b-q4_0.gguf \\
        -d ../shared/models/salty279K.gguf --stream --ram-budget 160M --tree auto -t 2
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

PROMPTS = ["Once upon a time, there was a little girl", "The cat sat on the mat", "Tom and Sue went to the park",
           "One day, a big dog found a ball", "Lily wanted to fly a kite", "The sun was shining and the birds",
           "Ben had a red car", "Mia and her mom baked a cake"]
NAMES = ["Anna", "Bob", "Carl", "Dora", "Emma", "Finn", "Gus", "Hana", "Ivy", "Jack"]
STORY = ("a little girl named Lily. She loved to play in the park with her friends. One day, she found a shiny "
         "red ball under a big tree. She picked it up and ran to show her mom. Her mom smiled and said, you can "
         "keep it if you share it with your friends. Lily was very happy. She ran back to the park and played "
         "with the ball all day long. The sun was shining and the birds")


def fresh_prompt():
    """A long prompt no earlier request started with, so no cached prefix serves it."""
    return f"{random.choice(NAMES)} and {random.choice(NAMES)} met {random.randrange(10**6)} times {STORY}"


class Server:
    """`flashspec serve` on a free port, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, flashspec, parallel, serve_args, cgroup):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        tasks = f"/sys/fs/cgroup/memory/{cgroup}/tasks" if cgroup else None

        def enter_cgroup():
            if tasks:
                with open(tasks, "w") as f:
                    f.write(str(os.getpid()))

        cmd = [flashspec, "serve", "--parallel", str(parallel), "--port", str(self.port)] + serve_args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=enter_cgroup, text=True)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"bench-serve: the server exited: {self.proc.stderr.read().strip()}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2).read()
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        sys.exit("bench-serve: the server did not answer /health within 10 minutes")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def complete(url, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        j = json.load(r)
    return j["choices"][0]["text"], j["usage"]["completion_tokens"]


def stream(url, prompt, max_tokens):
    """Arrival times of the streamed text pieces, and the request's start time."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    t0, times = time.time(), []
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]" and json.loads(line[5:])["choices"][0].get("text"):
                times.append(time.time())
    return t0, times


def clients_run(args, n, answers):
    """n clients, --requests each; their aggregate tokens/s. Fills answers[prompt]."""
    tokens, errors, texts = [0] * n, [], {}

    def client(i):
        try:
            for r in range(args.requests):
                p = PROMPTS[(i + r * n) % len(PROMPTS)]
                text, used = complete(server.url, p, args.max_tokens)
                tokens[i] += used
                texts[p] = text
        except Exception as e:  # reported after the run, not lost in a thread
            errors.append(f"client {i}: {e}")

    with Server(args.flashspec, n, args.serve_args, args.cgroup) as server:
        t0 = time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.time() - t0
    if errors:
        sys.exit("bench-serve: " + "; ".join(errors))
    differ = [p for p, t in texts.items() if p in answers and answers[p] != t]
    compared = sum(1 for p in texts if p in answers)
    for p, t in texts.items():
        answers.setdefault(p, t)
    return {"clients": n, "tokens": sum(tokens), "seconds": round(seconds, 2),
            "tok_s": round(sum(tokens) / seconds, 2), "answers_compared": compared, "answers_differing": len(differ)}


def join_run(args):
    """TTFT of a request joining three streams, and the streams' gaps (ms) around it."""
    with Server(args.flashspec, 4, args.serve_args, args.cgroup) as server:
        alone = []
        for _ in range(3):
            t0, times = stream(server.url, fresh_prompt(), 4)
            alone.append((times[0] - t0) * 1000)
        runs = [{} for _ in range(3)]

        def streamer(i):
            runs[i]["t0"], runs[i]["times"] = stream(server.url, PROMPTS[i], args.join_tokens)

        threads = [threading.Thread(target=streamer, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(args.join_delay)
        j0, jt = stream(server.url, fresh_prompt(), 4)
        for t in threads:
            t.join()

    def gaps(a, b):  # between token arrivals in [a, b]; the tokens of one pass arrive together
        out = []
        for r in runs:
            ts = [t for t in r["times"] if a <= t <= b]
            out += [(y - x) * 1000 for x, y in zip(ts, ts[1:]) if (y - x) * 1000 > 5]
        return out

    before, during = gaps(j0 - args.join_delay, j0), gaps(j0, jt[0] + 0.05)
    return {"ttft_alone_ms": [round(x, 1) for x in alone], "ttft_join_ms": round((jt[0] - j0) * 1000, 1),
            "gap_before_median_ms": round(statistics.median(before), 1) if before else None,
            "gap_during_max_ms": round(max(during), 1) if during else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flashspec", default="build/bin/flashspec")
    ap.add_argument("--cgroup", help="cgroup v1 memory group to run the server in")
    ap.add_argument("--clients", default="1,4,8", help="client counts, comma-separated ('' for none)")
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--join", action="store_true", help="also measure a request joining three streams")
    ap.add_argument("--join-tokens", type=int, default=160, help="tokens each of the three streams asks for")
    ap.add_argument("--join-delay", type=float, default=3.0, help="seconds the streams run before the join")
    ap.add_argument("serve_args", nargs=argparse.REMAINDER, help="-- then flashspec serve's arguments")
    args = ap.parse_args()
    if args.serve_args[:1] == ["--"]:
        args.serve_args = args.serve_args[1:]
    if not os.access(args.flashspec, os.X_OK):
        sys.exit(f"bench-serve: {args.flashspec}: not built (scripts/run.sh builds it)")
    answers, first = {}, None
    for n in [int(x) for x in args.clients.split(",") if x]:
        r = clients_run(args, n, answers)
        first = first or r["tok_s"]
        r["vs_first"] = round(r["tok_s"] / first, 2)
        print(json.dumps(r), flush=True)
    if args.join:
        print(json.dumps(join_run(args)), flush=True)


if __name__ == "__main__":
    main()
