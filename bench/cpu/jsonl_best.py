"""For bench/cpu's scripts: the best tokens/s of each test in a file of llama-bench's or
moevm bench's JSON lines (-o jsonl; both name the fields alike), rounds appended to it in
turns: {"pp512": 1234.5, "tg128": 67.8}."""
import json


def best(path):
    out = {}
    for line in open(path):
        o = json.loads(line)
        test = f"pp{o['n_prompt']}" if o["n_prompt"] else f"tg{o['n_gen']}"
        out[test] = max(out.get(test, 0.0), float(o["avg_ts"]))
    return out
