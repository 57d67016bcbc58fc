#!/usr/bin/env python3
"""`moevm serve` end to end, from real HTTP clients (docs/serve.md).

Starts the server on a tiny model of each architecture given (port 0: the port it prints),
then: /health, /v1/models, /metrics; completions and chat completions, whole and streamed
(server-sent events), greedy so that a stream's pieces must add up to the whole reply;
several streaming clients at once against each alone; a client that leaves mid-stream (its
slot freed, counted as cancelled, the server still serving); stop strings; malformed JSON,
wrong field types, an unknown route or method, a body over the limit, a prompt longer than
the context, each an OpenAI error object with its status; the OpenAI Python client's
streamed chat where the package is installed; SIGTERM ends the server with its statistics;
llama.cpp's --n-cpu-moe and -ngl taken as `moevm run` takes them; llama.cpp's server's own
API (/completion whole and streamed, its prompt shapes, stop types, slots and cache,
/tokenize, /detokenize, /apply-template, /props, /slots, /infill) against the OpenAI
routes' answers and llama.cpp's layouts; API
keys and CORS; the
log-probabilities of all three APIs against a softmax of `moevm run --logits-out`'s logits;
grammars and JSON Schemas in each API's fields, and --grammar as the default.

    test_serve.py MOEVM WORKDIR [ARCH ...]
Prints "N passed, M failed" last; exit 1 on a failure.
"""
import http.client
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what, flush=True)


class Server:
    def __init__(self, moevm, model, *args, env=None):
        self.p = subprocess.Popen([moevm, "serve", "-m", model, "--port", "0", *args],
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[\d.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            raise RuntimeError("server did not start: " + "".join(self.log))
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def request(self, method, path, body=None, raw=None):
        c = self.conn()
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, text

    def post(self, path, body):
        status, text = self.request("POST", path, body)
        return status, json.loads(text)

    def stream_lines(self, path, body):
        """The status and the lines of a streamed reply to body."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(dict(body, stream=True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        lines = [line.decode().rstrip("\n") for line in r]
        c.close()
        return r.status, lines

    def stream(self, path, body):
        """The events' JSON objects and whether [DONE] ended them (llama.cpp's /completion
        sends none: its last event says "stop": true)."""
        status, lines = self.stream_lines(path, body)
        data = [line.strip() for line in lines if line.startswith("data: ")]
        done = "data: [DONE]" in data
        events = [json.loads(d[6:]) for d in data[:data.index("data: [DONE]")
                                                 if done else len(data)]]
        return status, events, done

    def metrics(self):
        status, text = self.request("GET", "/metrics")
        return {k: float(v) for k, v in re.findall(r"^(moevm_\w+) (\S+)$", text, re.M)}

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=60)
        self.reader.join(timeout=10)
        return rc, "".join(self.log)


HARMONY_MARKUP = r"<\|(channel|message|start|end|constrain)\|>"


def chat_text(events):
    return "".join(e["choices"][0]["delta"].get("content", "") for e in events)


GREEDY = {"temperature": 0, "max_tokens": 12}
MSGS = [{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Tell me about the sea."}]


def basics(s, arch):
    status, text = s.request("GET", "/health")
    check(status == 200 and json.loads(text)["status"] == "ok", f"{arch}: /health")
    status, text = s.request("GET", "/v1/models")
    models = json.loads(text)
    check(status == 200 and models["object"] == "list" and models["data"][0]["id"],
          f"{arch}: /v1/models")
    status, body = s.post("/v1/completions", dict(GREEDY, prompt="Once upon a time"))
    check(status == 200 and body["object"] == "text_completion" and
          body["choices"][0]["finish_reason"] in ("stop", "length") and
          body["usage"]["completion_tokens"] <= 12, f"{arch}: completion {body}")
    status2, again = s.post("/v1/completions", dict(GREEDY, prompt="Once upon a time"))
    check(again["choices"][0]["text"] == body["choices"][0]["text"],
          f"{arch}: greedy completions repeat")
    status, events, done = s.stream("/v1/completions", dict(GREEDY, prompt="Once upon a time"))
    check(status == 200 and done and
          "".join(e["choices"][0]["text"] for e in events) == body["choices"][0]["text"],
          f"{arch}: streamed completion adds up to the whole one")
    status, whole = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS))
    msg = whole["choices"][0]["message"] if status == 200 else {}
    check(status == 200 and whole["object"] == "chat.completion" and
          msg.get("role") == "assistant" and isinstance(msg.get("content"), str),
          f"{arch}: chat completion {whole}")
    status, events, done = s.stream("/v1/chat/completions", dict(GREEDY, messages=MSGS))
    check(status == 200 and done and events and
          events[0]["choices"][0]["delta"].get("role") == "assistant" and
          events[-1]["choices"][0]["finish_reason"] in ("stop", "length") and
          chat_text(events) == msg.get("content"), f"{arch}: streamed chat = whole chat")
    # n replies (OpenAI's n): reply i is the one a request alone gets with the seed + i
    ask = {"messages": MSGS, "max_tokens": 12, "temperature": 0.9, "seed": 5}
    status, three = s.post("/v1/chat/completions", dict(ask, n=3))
    alone = [s.post("/v1/chat/completions", dict(ask, seed=5 + i))[1]["choices"][0]["message"]
             ["content"] for i in range(3)]
    check(status == 200 and [c["index"] for c in three["choices"]] == [0, 1, 2] and
          [c["message"]["content"] for c in three["choices"]] == alone,
          f"{arch}: n 3: {str(three)[:300]} against {alone}")
    return msg.get("content", "")


def llama_api(s, arch):
    """llama.cpp's server's own routes. Greedy /completion gives the text /v1/completions
    gives for the same prompt; its stream adds up to it, tokens and all; the ids it returns
    detokenize to it; token ids and mixed prompts read as llama.cpp reads them; /tokenize and
    /detokenize agree; /apply-template's prompt completed is the chat reply."""
    prompt = "Once upon a time"
    status, oai = s.post("/v1/completions", dict(GREEDY, prompt=prompt))
    ask = {"prompt": prompt, "n_predict": 12, "temperature": 0}
    status, body = s.post("/completion", dict(ask, return_tokens=True))
    text = body.get("content")
    check(status == 200 and text == oai["choices"][0]["text"] and body["stop"] is True and
          body["tokens_predicted"] == oai["usage"]["completion_tokens"] == len(body["tokens"]) and
          body["tokens_evaluated"] == oai["usage"]["prompt_tokens"] and
          body["stop_type"] in ("eos", "limit") and body["prompt"].endswith(prompt) and
          body["generation_settings"]["n_predict"] == 12 and
          body["timings"]["predicted_n"] == body["tokens_predicted"] and
          body["timings"]["prompt_n"] + body["timings"]["cache_n"] == body["tokens_evaluated"],
          f"{arch}: /completion {body}")
    # logit_bias, llama.cpp's shape and OpenAI's: a token pushed up is every token; the
    # greedy reply's first token banned comes nowhere
    first = body["tokens"][0]
    status, pushed = s.post("/completion", dict(ask, n_predict=4, return_tokens=True,
                                                logit_bias=[[first, 100]]))
    check(status == 200 and pushed["tokens"] == [first] * 4, f"{arch}: logit_bias +100 {pushed}")
    status, banned = s.post("/completion", dict(ask, return_tokens=True,
                                                logit_bias={str(first): False}))
    check(status == 200 and banned["tokens"] and first not in banned["tokens"],
          f"{arch}: logit_bias false {banned}")
    # llama.cpp's t_max_predict_ms (llama.vscode's): the reply ends once it has taken that
    # long and made a new line (here every token is one), as a length limit
    pieces = s.post("/tokenize", {"content": "a\nb", "with_pieces": True})[1]["tokens"]
    nl = [t["id"] for t in pieces if t["piece"] == "\n"]
    lines = dict(ask, n_predict=200, ignore_eos=True, logit_bias=[[nl[0] if nl else 0, 100]])
    status, capped = s.post("/completion", dict(lines, t_max_predict_ms=1))
    status2, whole = s.post("/completion", lines)
    check(status == status2 == 200 and capped["stop_type"] == "limit" and
          0 < capped["tokens_predicted"] < 200 and whole["tokens_predicted"] == 200 and
          capped["content"].startswith("\n"),
          f"{arch}: t_max_predict_ms {capped.get('tokens_predicted')} {whole.get('tokens_predicted')}")
    status, plain = s.post("/completion", ask)
    check(status == 200 and plain["content"] == text and plain["tokens"] == [] and
          plain["tokens_cached"] > 0, f"{arch}: /completion again, cached: {plain}")
    # the slot that has the prompt cached, told not to use its cache
    status, fresh = s.post("/completion", dict(ask, cache_prompt=False, id_slot=plain["id_slot"]))
    check(status == 200 and fresh["content"] == text and fresh["tokens_cached"] == 0 and
          fresh["id_slot"] == plain["id_slot"], f"{arch}: cache_prompt false: {fresh}")
    other = (plain["id_slot"] + 1) % 3
    status, there = s.post("/completion", dict(ask, id_slot=other))
    check(status == 200 and there["content"] == text and there["id_slot"] == other,
          f"{arch}: id_slot {other}: {there}")
    status, detok = s.post("/detokenize", {"tokens": body["tokens"]})
    check(status == 200 and detok["content"] == text, f"{arch}: /detokenize {detok} {text!r}")
    status, events, done = s.stream("/completion", ask)
    check(status == 200 and not done and events and events[-1]["stop"] is True and
          all(e["stop"] is False for e in events[:-1]) and
          "".join(e["content"] for e in events) == text and
          [t for e in events for t in e["tokens"]] == body["tokens"] and
          events[-1]["tokens_predicted"] == body["tokens_predicted"],
          f"{arch}: streamed /completion adds up: {events[-2:]}")
    status, toks = s.post("/tokenize", {"content": prompt, "add_special": True,
                                        "with_pieces": True})
    ids = [t["id"] for t in toks["tokens"]]
    check(status == 200 and "".join(t["piece"] for t in toks["tokens"]).endswith(prompt),
          f"{arch}: /tokenize with pieces {toks}")
    status, by_ids = s.post("/completion", dict(ask, prompt=ids))
    check(status == 200 and by_ids["content"] == text, f"{arch}: a prompt of ids {by_ids}")
    # ids then text: the text's tokens without a BOS (a BOS only where text comes first)
    head = s.post("/tokenize", {"content": prompt[:4], "add_special": True})[1]["tokens"]
    tail = s.post("/tokenize", {"content": prompt[4:]})[1]["tokens"]
    status, mixed = s.post("/completion", dict(ask, prompt=[*head, prompt[4:]]))
    status2, split = s.post("/completion", dict(ask, prompt=head + tail))
    check(status == status2 == 200 and mixed["tokens_evaluated"] == len(head) + len(tail) and
          mixed["content"] == split["content"], f"{arch}: a mixed prompt {mixed} {split}")
    # OpenAI's reasoning_effort, as llama.cpp's server reads it: "none" is the template's
    # enable_thinking false (the prompt changes where the template has it), another value
    # is the template's reasoning_effort (gpt-oss's "Reasoning: high")
    status, plain = s.post("/apply-template", {"messages": MSGS})
    status, none = s.post("/apply-template", {"messages": MSGS, "reasoning_effort": "none"})
    off = s.post("/apply-template", {"messages": MSGS,
                                     "chat_template_kwargs": {"enable_thinking": False}})[1]
    status, high = s.post("/apply-template", {"messages": MSGS, "reasoning_effort": "high"})
    check(none["prompt"] == off["prompt"] and
          (none["prompt"] != plain["prompt"]) == (arch in ("qwen3moe", "glm4moe", "deepseek2")) and
          ("Reasoning: high" in high["prompt"]) == (arch == "gpt-oss"),
          f"{arch}: reasoning_effort: {plain} {none} {high}")
    # llama.cpp's reasoning budget, where the prompt opens the reasoning (DeepSeek-R1's and
    # MiniMax-M2's generation prompts): two tokens of thinking, then the message and the end
    # mark forced; 0: the message alone; the reply goes on after it
    if re.search(r"<think>\s*$", plain["prompt"]):
        for budget, msg in ((2, " Enough."), (0, " Skip.")):
            status, c = s.post("/v1/chat/completions", dict(
                GREEDY, messages=MSGS, max_tokens=40, reasoning_budget_tokens=budget,
                reasoning_budget_message=msg))
            m = c["choices"][0]["message"] if status == 200 else {}
            rc = (m.get("reasoning_content") or "").strip()
            check(rc.endswith(msg.strip()) and (budget or rc == msg.strip()) and
                  c["usage"]["completion_tokens"] > budget + 2,
                  f"{arch}: reasoning budget {budget}: {m}")
    status, bad = s.post("/v1/chat/completions", {"messages": MSGS, "reasoning_budget_tokens": -2})
    check(status == 400 and "'reasoning_budget_tokens'" in bad["error"]["message"],
          f"{arch}: reasoning_budget_tokens -2: {bad}")
    status, bad = s.post("/v1/chat/completions", {"messages": MSGS, "reasoning_effort": 3})
    check(status == 400 and "'reasoning_effort'" in bad["error"]["message"],
          f"{arch}: reasoning_effort 3: {bad}")
    status, tmpl = s.post("/apply-template", {"messages": MSGS})
    status, chat = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS,
                                                       reasoning_format="none"))
    status, done_chat = s.post("/completion", dict(ask, prompt=tmpl.get("prompt", "")))
    # the chat's reply keeps its syntax's control tokens (the reader needs them); the
    # completion's text drops them
    raw = re.sub(HARMONY_MARKUP if arch == "gpt-oss" else "^$", "",
                 chat["choices"][0]["message"]["content"])
    check(done_chat.get("content") == raw,
          f"{arch}: /apply-template then /completion = chat: {done_chat} {chat}")
    stop = text[1:3]
    if len(stop) == 2 and stop.isascii() and stop.isprintable():
        status, cut = s.post("/completion", dict(ask, stop=[stop, "\x01never"]))
        check(status == 200 and cut["stop_type"] == "word" and cut["stopping_word"] == stop and
              cut["content"] == text[:text.index(stop)], f"{arch}: stop word {stop!r}: {cut}")
    # several prompts in one request: each answered as it would be alone, by index
    prompts = [prompt, "The king", [*head, *tail]]
    status, many = s.post("/completion", dict(ask, prompt=prompts))
    alone = [s.post("/completion", dict(ask, prompt=p))[1]["content"] for p in prompts]
    check(status == 200 and isinstance(many, list) and
          [m["index"] for m in many] == [0, 1, 2] and [m["content"] for m in many] == alone,
          f"{arch}: /completion of several prompts {str(many)[:300]} {alone}")
    status, oai = s.post("/v1/completions", dict(GREEDY, prompt=[prompt, "The king"]))
    one = [s.post("/v1/completions", dict(GREEDY, prompt=p))[1] for p in (prompt, "The king")]
    check(status == 200 and [c["index"] for c in oai["choices"]] == [0, 1] and
          [c["text"] for c in oai["choices"]] == [o["choices"][0]["text"] for o in one] and
          oai["usage"]["completion_tokens"] == sum(o["usage"]["completion_tokens"] for o in one),
          f"{arch}: /v1/completions of two prompts {oai}")
    status, none = s.post("/completion", dict(ask, n_predict=0))
    check(status == 200 and none["content"] == "" and none["tokens_predicted"] == 0 and
          none["stop_type"] == "limit", f"{arch}: n_predict 0: {none}")
    # /slots: each slot's state; one serving a long reply shows it (polled while it runs)
    status, text_slots = s.request("GET", "/slots?fail_on_no_slot=1")
    slots = json.loads(text_slots)
    check(status == 200 and [x["id"] for x in slots] == [0, 1, 2] and
          all(x["n_ctx"] == 4096 and x["params"]["top_k"] == 40 for x in slots),
          f"{arch}: /slots {text_slots[:300]}")
    done = threading.Event()

    def long_reply():
        s.post("/completion", dict(ask, n_predict=3000, ignore_eos=True, id_slot=1, top_k=7))
        done.set()

    t = threading.Thread(target=long_reply)
    t.start()
    seen = None
    while not done.is_set() and seen is None:
        # this reply's slot (top-k 7): the copy is of the last round, which may still show
        # a request whose reply has just been sent
        busy = [x for x in json.loads(s.request("GET", "/slots")[1])
                if x["is_processing"] and x["params"]["top_k"] == 7]
        seen = busy[0] if busy else None
    t.join()
    check(seen and seen["id"] == 1 and seen["params"]["top_k"] == 7 and
          seen["params"]["n_predict"] == 3000 and seen["next_token"][0]["has_next_token"] and
          seen["next_token"][0]["n_decoded"] + seen["next_token"][0]["n_remain"] == 3000,
          f"{arch}: /slots while a slot serves: {seen}")
    status, text_props = s.request("GET", "/props")
    props = json.loads(text_props)
    check(status == 200 and props["total_slots"] == 3 and
          props["default_generation_settings"]["n_ctx"] == 4096 and
          props["default_generation_settings"]["params"]["top_k"] == 40 and
          props["chat_template"] and props["model_path"].endswith(".gguf"),
          f"{arch}: /props {text_props[:300]}")


def run_logits(moevm, model, prompt, work, pos):
    """The logits `moevm run` computes at position pos of the prompt (docs/engine.md's
    --logits-out file): after the prompt's last, the first generated token's distribution."""
    path = os.path.join(work, "logits.bin")
    subprocess.run([moevm, "run", "-m", model, "-p", prompt, "-n", "1", "--temp", "0",
                    "-t", "2", "--logits-out", path], check=True, capture_output=True)
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n_vocab, rows = struct.unpack_from("<4sIII", data)
    assert magic == b"MVML"
    for r in range(rows):
        at = 16 + r * (8 + 4 * n_vocab)
        if struct.unpack_from("<ii", data, at)[1] == pos:
            return struct.unpack_from(f"<{n_vocab}f", data, at + 8)
    raise AssertionError(f"no row at position {pos} of {rows}")


def logprobs(s, moevm, model, arch, work):
    """Each API's log-probabilities: the first token's are log-softmax of the logits
    `moevm run` computes after the same prompt (the top ones, most probable first, ties to
    the lower id); greedy picks the most probable; the entries follow the tokens; a stream
    carries the same entries as the whole reply."""
    prompt = "Once upon a time"
    n_prompt = s.post("/completion", {"prompt": prompt, "n_predict": 0})[1]["tokens_evaluated"]
    logits = run_logits(moevm, model, prompt, work, n_prompt - 1)
    top = max(logits)
    lse = top + math.log(sum(math.exp(x - top) for x in logits))
    want = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:3]
    ask = {"prompt": prompt, "n_predict": 4, "temperature": 0, "n_probs": 3,
           "return_tokens": True}
    status, body = s.post("/completion", ask)
    probs = body.get("completion_probabilities", [])
    first = probs[0]["top_logprobs"] if probs else []
    check(status == 200 and len(probs) == body["tokens_predicted"] and
          [p["id"] for p in probs] == body["tokens"] and
          [t["id"] for t in first] == want and
          all(abs(t["logprob"] - (logits[t["id"]] - lse)) < 2e-3 for t in first) and
          all(p["id"] == p["top_logprobs"][0]["id"] and p["logprob"] <= 0 and
              p["logprob"] == p["top_logprobs"][0]["logprob"] and
              sorted(t["logprob"] for t in p["top_logprobs"])[::-1] ==
              [t["logprob"] for t in p["top_logprobs"]] for p in probs),
          f"{arch}: /completion n_probs {want} {[(t['id'], t['logprob']) for t in first]} "
          f"lse {lse}: {probs[:1]}")
    status, events, done = s.stream("/completion", ask)
    check(status == 200 and
          [p for e in events for p in e.get("completion_probabilities", [])] == probs,
          f"{arch}: streamed n_probs differ: {events[:2]}")
    status, chat = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 4,
                                              "temperature": 0, "logprobs": 2})
    lp = chat["choices"][0]["logprobs"] if status == 200 else None
    check(lp and lp["token_logprobs"] == [p["logprob"] for p in probs] and
          [list(t.values())[0] for t in lp["top_logprobs"]] == [p["logprob"] for p in probs] and
          lp["tokens"] == [p["token"] for p in probs] and
          lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i])
                                for i in range(len(lp["tokens"]))],
          f"{arch}: /v1/completions logprobs {lp}")
    status, c = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS, logprobs=True,
                                                    top_logprobs=2))
    content = c["choices"][0]["logprobs"]["content"] if status == 200 else []
    # the chat's prompt completed by /completion: the same entries, with their ids
    tmpl = s.post("/apply-template", {"messages": MSGS})[1]["prompt"]
    status, same = s.post("/completion", {"prompt": tmpl, "n_predict": 12, "temperature": 0,
                                          "n_probs": 2})
    strip = [{k: v for k, v in e.items() if k != "id"} for e in
             same.get("completion_probabilities", [])]
    for e in strip:
        e["top_logprobs"] = [{k: v for k, v in t.items() if k != "id"}
                             for t in e["top_logprobs"]]
    check(len(content) == c["usage"]["completion_tokens"] and content == strip and
          all(e["token"] == e["top_logprobs"][0]["token"] and len(e["top_logprobs"]) == 2
              for e in content), f"{arch}: chat logprobs {str(c)[:300]} {str(strip)[:300]}")
    status, events, done = s.stream("/v1/chat/completions", dict(GREEDY, messages=MSGS,
                                                                  logprobs=True))
    streamed = [e for ev in events for e in (ev["choices"][0].get("logprobs") or
                                             {}).get("content", [])]
    check(done and [e["logprob"] for e in streamed] == [e["logprob"] for e in content],
          f"{arch}: streamed chat logprobs {streamed[:2]}")
    # a token logit_bias pushed to the top reports the model's log-probability, not the
    # biased one (as llama.cpp's server does)
    status, body = s.post("/completion", dict(ask, n_predict=1, logit_bias=[[want[1], 100]]))
    p0 = body.get("completion_probabilities", [{}])[0]
    check(status == 200 and p0.get("id") == want[1] and
          abs(p0["logprob"] - (logits[want[1]] - lse)) < 2e-3, f"{arch}: biased logprob {p0}")
    # llama.cpp's post_sampling_probs: the distribution each draw was made from. Top-k 3 at
    # temperature 0.8: three tokens summing to 1, the drawn one among them, the first
    # token's softmax(logits / 0.8) over the three most probable; greedy: the token, 1
    post = {"prompt": prompt, "n_predict": 4, "temperature": 0.8, "top_k": 3, "top_p": 1,
            "min_p": 0, "repeat_penalty": 1, "n_probs": 5, "post_sampling_probs": True,
            "seed": 2}
    status, body = s.post("/completion", post)
    pp = body.get("completion_probabilities", [])
    w = [math.exp((logits[i] - logits[want[0]]) / 0.8) for i in want]
    first = pp[0]["top_probs"] if pp else []
    check(status == 200 and len(pp) == 4 and [t["id"] for t in first] == want and
          all(abs(t["prob"] - w[k] / sum(w)) < 2e-3 for k, t in enumerate(first)) and
          all(len(p["top_probs"]) == 3 and "logprob" not in p and
              abs(sum(t["prob"] for t in p["top_probs"]) - 1) < 1e-4 and
              any(t["id"] == p["id"] and abs(t["prob"] - p["prob"]) < 1e-6
                  for t in p["top_probs"]) for p in pp),
          f"{arch}: post_sampling_probs {want} {w}: {pp[:2]}")
    status, body = s.post("/completion", dict(ask, post_sampling_probs=True))
    check(status == 200 and body["completion_probabilities"] and
          all(p["prob"] == 1 and [(t["id"], t["prob"]) for t in p["top_probs"]] ==
              [(p["id"], 1)] for p in body["completion_probabilities"]),
          f"{arch}: greedy post_sampling_probs {body.get('completion_probabilities')}")
    status, c = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS, logprobs=True,
                                                    top_logprobs=2, post_sampling_probs=True))
    content = c["choices"][0]["logprobs"]["content"] if status == 200 else []
    check(content and all(e["prob"] == 1 and len(e["top_probs"]) == 1 for e in content),
          f"{arch}: chat post_sampling_probs {str(c)[:300]}")


def infill(s, arch):
    """llama.cpp's /infill: on a vocabulary with FIM tokens (the Qwen presets), the prompt
    laid out as llama.cpp's server lays it (the repository's extra files, the BOS where the
    vocabulary adds one, then prefix, prompt, suffix between the FIM tokens) completes as
    /completion completes those ids; without them, a 501; a missing input a 400."""
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
            "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"}],
            "prompt": "return", "n_predict": 8, "temperature": 0}
    fim = {}
    for name in ("fim_prefix", "fim_suffix", "fim_middle", "repo_name", "file_sep"):
        ids = s.post("/tokenize", {"content": f"<|{name}|>"})[1]["tokens"]
        fim[name] = ids[0] if len(ids) == 1 else None
    status, got = s.post("/infill", body)
    if None in (fim["fim_prefix"], fim["fim_suffix"], fim["fim_middle"]):
        check(status == 501 and got["error"]["type"] == "not_supported_error",
              f"{arch}: /infill without FIM tokens: {status} {got}")
        return
    def tok(text):
        return s.post("/tokenize", {"content": text, "parse_special": False})[1]["tokens"]
    bos = s.post("/tokenize", {"content": "", "add_special": True})[1]["tokens"]
    extra = ([fim["repo_name"]] + tok("myproject\n") if fim["repo_name"] is not None else [])
    extra += [fim["file_sep"]] + tok("util.py\n") + tok(body["input_extra"][0]["text"])
    extra += [fim["file_sep"]] + tok("filename\n")
    want = extra + bos + [fim["fim_prefix"]] + tok(body["input_prefix"]) + \
        s.post("/tokenize", {"content": "return"})[1]["tokens"] + [fim["fim_suffix"]] + \
        tok(body["input_suffix"]) + [fim["fim_middle"]]
    status2, same = s.post("/completion", {"prompt": want, "n_predict": 8, "temperature": 0})
    check(status == 200 and status2 == 200 and got["tokens_evaluated"] == len(want) and
          got["content"] == same["content"] and got["prompt"] == same["prompt"],
          f"{arch}: /infill {str(got)[:300]} against {len(want)} ids: {str(same)[:200]}")
    status, events, done = s.stream("/infill", body)
    check(status == 200 and events and events[-1]["stop"] is True and
          "".join(e["content"] for e in events) == got["content"],
          f"{arch}: streamed /infill {events[-1:]}")
    status, bad = s.post("/infill", {"input_prefix": "x"})
    check(status == 400 and "input_suffix" in bad["error"]["message"],
          f"{arch}: /infill without input_suffix: {status} {bad}")
    status, bad = s.post("/infill", dict(body, input_extra=[{"filename": 5, "text": "x"}]))
    check(status == 400 and "'input_extra'[0]" in bad["error"]["message"],
          f"{arch}: /infill with a bad input_extra: {status} {bad}")


def errors(s, arch):
    cases = [("POST", "/v1/chat/completions", "{not json", 400),
             ("POST", "/v1/chat/completions", json.dumps({"messages": "hi"}), 400),
             ("POST", "/v1/chat/completions", json.dumps({"messages": []}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": 5}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "temperature": "hot"}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": -5}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "stop": [""]}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "n": 65}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "n": 2, "stream": True}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": ["x", "y"], "n": 2}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "stream": "yes"}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "stream": 1}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "ignore_eos": "x"}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 1.5}), 400),
             ("POST", "/v1/chat/completions",
              json.dumps({"messages": MSGS, "chat_template_kwargs": 5}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x"}) + " xyz", 400),
             ("POST", "/v1/completions", '{"prompt": "a\tb"}', 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "a\u0000" + "b" * 40}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "word " * 9000}), 400),
             ("GET", "/v1/chat/completions", None, 405),
             ("POST", "/health", "{}", 405),
             ("GET", "/nope", None, 404),
             ("POST", "/v1/completions", "x" * (9 << 20), 413),
             ("POST", "/completion", json.dumps({"prompt": ["a", "b"], "stream": True}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": ["a"] * 65}), 400),
             ("POST", "/completion", json.dumps({"prompt": [1, 1 << 30]}), 400),
             ("POST", "/completion", json.dumps({"prompt": [1, None]}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "grammar": "root ::= x"}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "grammar": 5}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "json_schema": "{}"}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "json_schema": {"type": 5}}),
              400),
             ("POST", "/completion", json.dumps({"prompt": "x", "json_schema": {},
                                                 "grammar": "root ::= \"a\""}), 400),
             ("POST", "/v1/chat/completions", json.dumps({
                 "messages": MSGS, "response_format": {"type": "xml"}}), 400),
             ("POST", "/v1/chat/completions", json.dumps({
                 "messages": MSGS, "response_format": "json"}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "n_probs": 21}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "logprobs": 2,
                                                     "post_sampling_probs": True}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "n_probs": 2,
                                                 "post_sampling_probs": "yes"}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "echo": True}), 400),
             ("POST", "/v1/completions", json.dumps({"prompt": "x", "logprobs": True}), 400),
             ("POST", "/v1/chat/completions", json.dumps({"messages": MSGS,
                                                          "top_logprobs": 2}), 400),
             ("POST", "/v1/chat/completions", json.dumps({"messages": MSGS, "logprobs": 1}),
              400),
             ("POST", "/completion", json.dumps({"prompt": "x", "id_slot": 3}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "cache_prompt": 1}), 400),
             ("POST", "/completion", json.dumps({"prompt": "x", "n_predict": -2}), 400),
             ("POST", "/completion", "x" * (9 << 20), 413),
             ("GET", "/completion", None, 405),
             ("POST", "/tokenize", "{not json", 400),
             ("POST", "/tokenize", json.dumps({"content": 5}), 400),
             ("POST", "/tokenize", json.dumps({"content": "x", "with_pieces": "yes"}), 400),
             ("POST", "/detokenize", json.dumps({"tokens": ["a"]}), 400),
             ("POST", "/detokenize", json.dumps({"tokens": [-1]}), 400),
             ("POST", "/apply-template", json.dumps({"messages": "hi"}), 400),
             ("GET", "/tokenize", None, 405),
             ("POST", "/props", "{}", 405),
             ("POST", "/slots", "{}", 405)]
    for method, path, raw, want in cases:
        status, text = s.request(method, path, raw=raw)
        try:
            err = json.loads(text)["error"]
            ok = isinstance(err["message"], str) and err["message"] and "type" in err
        except (ValueError, KeyError, TypeError):
            ok = False
        check(status == want and ok, f"{arch}: {method} {path} {str(raw)[:40]!r}: "
                                     f"{status} {text[:200]}")


YES_NO = r'root ::= ("yes" | "no") ", " [a-z]{2,8} "."'
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"},
                                           "tag": {"enum": ["red", "blue"]}},
          "required": ["n", "ok", "tag"]}


def valid(text):
    """Whether text is a JSON object that SCHEMA validates (an independent check)."""
    try:
        o = json.loads(text)
    except ValueError:
        return False
    return (isinstance(o, dict) and set(o) == {"n", "ok", "tag"} and type(o["n"]) is int and
            type(o["ok"]) is bool and o["tag"] in ("red", "blue"))


def grammars(s, arch):
    """Constrained replies in every API's words: llama.cpp's `grammar` and `json_schema`,
    OpenAI's `response_format`; drawn at temperature 1 (so the grammar, not the model, makes
    them right), whole, streamed, and several to a request (each a sentence of its own)."""
    drawn = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0}
    for seed in range(3):
        status, body = s.post("/completion", dict(drawn, prompt="Q:", grammar=YES_NO,
                                                  seed=seed, n_predict=64))
        check(status == 200 and re.fullmatch(r"(yes|no), [a-z]{2,8}\.", body["content"]) and
              body["stop_type"] == "eos", f"{arch}: /completion grammar: {status} {body}")
    status, events = s.stream("/completion", dict(drawn, prompt="Q:", grammar=YES_NO,
                                                  seed=7, stream=True))[:2]
    text = "".join(e["content"] for e in events)
    check(status == 200 and re.fullmatch(r"(yes|no), [a-z]{2,8}\.", text),
          f"{arch}: streamed /completion grammar: {text!r}")
    status, body = s.post("/completion", dict(drawn, prompt="Q:", json_schema=SCHEMA, seed=1,
                                              n_predict=200))
    check(status == 200 and valid(body["content"]), f"{arch}: json_schema: {status} {body}")
    schema_rf = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}
    status, body = s.post("/v1/chat/completions", dict(drawn, messages=MSGS, seed=2, n=3,
                                                       max_tokens=200,
                                                       response_format=schema_rf))
    texts = [c["message"]["content"] for c in body.get("choices", [])]
    check(status == 200 and len(texts) == 3 and all(valid(t) for t in texts),
          f"{arch}: response_format json_schema, n 3: {status} {texts}")
    status, body = s.post("/v1/chat/completions", dict(drawn, messages=MSGS, seed=3,
                                                       max_tokens=300, response_format={
                                                           "type": "json_object"}))
    reply = body["choices"][0]["message"]["content"] if status == 200 else ""
    try:
        obj = json.loads(reply)
    except ValueError:
        obj = None
    check(isinstance(obj, dict) or body["choices"][0]["finish_reason"] == "length",
          f"{arch}: response_format json_object: {status} {reply!r}")
    status, body = s.post("/v1/completions", dict(drawn, prompt=["a", "b"], seed=4,
                                                  max_tokens=200, json_schema=SCHEMA))
    check(status == 200 and all(valid(c["text"]) for c in body["choices"]),
          f"{arch}: two prompts, json_schema: {status} {body}")
    # a finished grammar with the end masked: the reply stops there, not at the limit
    status, body = s.post("/completion", dict(drawn, prompt="Q:", grammar='root ::= "ab"',
                                              ignore_eos=True, n_predict=20))
    check(status == 200 and body["content"] == "ab", f"{arch}: ignore_eos grammar: {body}")
    status, body = s.post("/completion", {"prompt": "x", "grammar": "root ::= foo"})
    check(status == 400 and "undefined rule 'foo'" in body["error"]["message"],
          f"{arch}: a bad grammar is named: {body}")


TOOLS = [{"type": "function", "function": {
              "name": "get_weather", "description": "The weather in a city.",
              "parameters": {"type": "object", "additionalProperties": False,
                             "properties": {"city": {"type": "string", "maxLength": 10},
                                            "days": {"type": "integer", "minimum": 1,
                                                     "maximum": 7}},
                             "required": ["city", "days"]}}},
         {"type": "function", "function": {
              "name": "search", "parameters": {
                  "type": "object", "additionalProperties": False,
                  "properties": {"q": {"type": "string", "maxLength": 12}},
                  "required": ["q"]}}}]
# the presets whose templates write tool calls, and those whose calls a grammar can force
# (all of them: the others' replies are plain, which a 400 says cannot be forced)
TOOL_TEMPLATES = {"qwen3moe", "glm4moe", "minimax-m2", "deepseek2", "gpt-oss"}
FORCIBLE = TOOL_TEMPLATES
# the presets whose generation prompt opens a reasoning block
THINKING = {"deepseek2", "minimax-m2"}


def call_ok(body, c, i, names=("get_weather", "search")):
    """A call as OpenAI gives it, its arguments valid for its tool's schema."""
    try:
        args = json.loads(c["function"]["arguments"])
    except (ValueError, KeyError, TypeError):
        return False
    name = c["function"]["name"]
    ok = (c["type"] == "function" and c["id"] == f"call_{body['id']}_{i}" and name in names and
          isinstance(args, dict))
    if ok and name == "get_weather":
        ok = (set(args) == {"city", "days"} and isinstance(args["city"], str) and
              len(args["city"]) <= 10 and type(args["days"]) is int and 1 <= args["days"] <= 7)
    elif ok:
        ok = set(args) == {"q"} and isinstance(args["q"], str) and len(args["q"]) <= 12
    return ok


def streamed_calls(events):
    """The calls of a chat stream's deltas, as OpenAI's client adds them up: a call begins
    with its index, id and name; more of the last one's arguments may follow (a grammar
    holds the calls, so they stream while written)."""
    calls = []
    for e in events:
        for c in e["choices"][0]["delta"].get("tool_calls", []):
            if "id" not in c:
                check(c["index"] == len(calls) - 1 and set(c) == {"index", "function"} and
                      set(c["function"]) == {"arguments"},
                      f"stream: more of call {len(calls) - 1}'s arguments: {c}")
                calls[-1]["function"]["arguments"] += c["function"]["arguments"]
                continue
            check(c["index"] == len(calls), f"stream: call index {c} after {len(calls)}")
            calls.append({k: v for k, v in c.items() if k != "index"})
    return calls


def tools(s, arch):
    """OpenAI's tools: described to the model by its template, earlier calls in the history,
    calls forced by `tool_choice` (at temperature 1: the grammar makes them valid), whole and
    streamed, and held to their tools under "auto" once begun; the reasoning of a model whose
    prompt opens it, apart from the content."""
    status, body = s.post("/apply-template", {"messages": MSGS, "tools": TOOLS})
    check(status == 200 and ("get_weather" in body["prompt"]) == (arch in TOOL_TEMPLATES),
          f"{arch}: the template describes the tools: {status} {body}")
    history = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    if arch in TOOL_TEMPLATES:
        status, body = s.post("/apply-template", {"messages": history, "tools": TOOLS})
        check(status == 200 and "Oslo" in body["prompt"] and "sunny" in body["prompt"],
              f"{arch}: a call and its result in the history: {status} {body}")
    drawn = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0, "max_tokens": 300}
    ask = dict(drawn, messages=MSGS, tools=TOOLS, tool_choice="required")
    if arch in THINKING:  # the rest of the reasoning its prompt opened: a random model's
        ask["logit_bias"] = {"</think>": 8}  # closing tag pushed, or it thinks to the limit
    status, body = s.post("/v1/chat/completions", dict(ask, seed=1))
    if arch not in FORCIBLE:
        check(status == 400 and "cannot be forced" in body["error"]["message"],
              f"{arch}: a call that cannot be forced is refused: {status} {body}")
    else:
        for seed in range(3):
            status, body = s.post("/v1/chat/completions", dict(ask, seed=seed))
            ch = body["choices"][0]
            calls = ch["message"].get("tool_calls", [])
            check(status == 200 and ch["finish_reason"] == "tool_calls" and len(calls) == 1 and
                  call_ok(body, calls[0], 0) and ch["message"]["content"] is None,
                  f"{arch}: tool_choice required, seed {seed}: {status} {body}")
        status, body = s.post("/v1/chat/completions", dict(ask, seed=5, tool_choice={
            "type": "function", "function": {"name": "search"}}))
        calls = body["choices"][0]["message"].get("tool_calls", [])
        check(status == 200 and len(calls) == 1 and call_ok(body, calls[0], 0, ("search",)),
              f"{arch}: tool_choice names a function: {status} {body}")
        # (room for a random model's several calls to close)
        status, body = s.post("/v1/chat/completions", dict(ask, seed=6, parallel_tool_calls=True,
                                                           max_tokens=800))
        calls = body["choices"][0]["message"].get("tool_calls", [])
        check(status == 200 and calls and all(call_ok(body, c, i) for i, c in enumerate(calls)),
              f"{arch}: parallel_tool_calls: {status} {body}")
        status, whole = s.post("/v1/chat/completions", dict(ask, seed=8))
        status2, events, done = s.stream("/v1/chat/completions", dict(ask, seed=8))
        calls = streamed_calls(events)
        check(status == status2 == 200 and done and calls and
              [dict(c, id=c["id"].replace(events[0]["id"], whole["id"])) for c in calls] ==
              whole["choices"][0]["message"]["tool_calls"] and
              events[-1]["choices"][0]["finish_reason"] == "tool_calls",
              f"{arch}: a streamed call is the whole reply's: {events} {whole}")
    status, body = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS, tools=TOOLS,
                                                       tool_choice="none"))
    check(status == 200 and "tool_calls" not in body["choices"][0]["message"],
          f"{arch}: tool_choice none: {status} {body}")
    for bad, why in ((dict(tools={"a": 1}), "'tools' must be an array"),
                     (dict(tools=[{"type": "function", "function": {}}]), "'tools'[0]"),
                     (dict(tools=TOOLS, tool_choice="sometimes"), "'tool_choice' must be"),
                     (dict(tools=TOOLS, tool_choice="required", grammar='root ::= "x"'),
                      "makes its own grammar"),
                     (dict(reasoning_format="hidden"), "'reasoning_format' must be")):
        status, body = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS, **bad))
        check(status == 400 and why in body["error"]["message"],
              f"{arch}: {bad} refused: {status} {body}")
    if arch in FORCIBLE:
        status, body = s.post("/v1/chat/completions", dict(ask, tool_choice={
            "type": "function", "function": {"name": "nope"}}))
        check(status == 400 and "'nope'" in body["error"]["message"],
              f"{arch}: an unknown function refused: {status} {body}")
    # the reasoning apart, whole and streamed; left in the content when asked
    status, whole = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS))
    status2, events, done = s.stream("/v1/chat/completions", dict(GREEDY, messages=MSGS))
    msg = whole["choices"][0]["message"]
    streamed = "".join(e["choices"][0]["delta"].get("reasoning_content", "") for e in events)
    check(status == status2 == 200 and msg.get("reasoning_content", "") == streamed and
          msg["content"] == chat_text(events) and
          (bool(streamed) if arch in THINKING else True),
          f"{arch}: the reasoning apart, whole and streamed: {whole} {events}")
    status, raw = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS,
                                                      reasoning_format="none"))
    check(status == 200 and "reasoning_content" not in raw["choices"][0]["message"],
          f"{arch}: reasoning_format none: {raw}")


def sampling(s, arch):
    """llama.cpp's further sampling fields, end to end, greedy so that each shows: a
    frequency or presence penalty of 100 lets no token come twice in the window (the plain
    greedy reply repeats, or the check means nothing); DRY lets no pair of tokens come again
    (its breakers set to a byte no token of the reply holds); Mirostat and the other steps
    reproduce a seed's reply; /props shows them; a bad one is a 400."""
    ask = {"prompt": "Once upon a time", "n_predict": 96, "temperature": 0, "ignore_eos": True,
           "return_tokens": True, "cache_prompt": False, "repeat_last_n": -1}
    status, plain = s.post("/completion", ask)
    toks = plain.get("tokens", [])
    check(status == 200 and len(toks) > len(set(toks)),
          f"{arch}: the greedy reply repeats no token: {toks}")
    for field in ("frequency_penalty", "presence_penalty"):
        status, body = s.post("/completion", dict(ask, **{field: 100}))
        t = body.get("tokens", [])
        check(status == 200 and t and len(t) == len(set(t)), f"{arch}: {field} 100: {t}")
    pairs = lambda t: [tuple(t[i:i + 2]) for i in range(len(t) - 1)]
    status, body = s.post("/completion", dict(ask, dry_multiplier=100, dry_allowed_length=1,
                                              dry_penalty_last_n=-1,
                                              dry_sequence_breakers=["\u0001"]))
    t = body.get("tokens", [])
    check(status == 200 and len(pairs(t)) == len(set(pairs(t))) and
          len(pairs(toks)) > len(set(pairs(toks))), f"{arch}: DRY: {t} (plain {toks})")
    # a request that turns DRY on gets llama.cpp's breakers ("\n", ":", ...) though the server
    # started without DRY: after "a : a : a", ":" pushed up by 50 would extend the repeat (a
    # penalty of 100), but a breaker token is never penalised
    toks2 = s.post("/tokenize", {"content": "a:", "with_pieces": True})[1]["tokens"]
    colon = [t["id"] for t in toks2 if t["piece"] == ":"]
    a_id = [t["id"] for t in toks2 if t["piece"] != ":"]
    if colon and a_id:
        c, a1 = colon[0], a_id[0]
        status, body = s.post("/completion", {
            "prompt": [a1, c, a1, c, a1], "n_predict": 1, "temperature": 0,
            "return_tokens": True, "logit_bias": [[c, 50]], "dry_multiplier": 100,
            "dry_allowed_length": 1, "dry_penalty_last_n": -1})
        check(status == 200 and body["tokens"] == [c], f"{arch}: DRY's default breakers {body}")
    drawn = dict(ask, temperature=0.9, seed=11, top_n_sigma=2, typical_p=0.95,
                 xtc_probability=0.5, xtc_threshold=0.1, dynatemp_range=0.5, min_keep=2)
    for extra in ({}, {"mirostat": 1}, {"mirostat": 2, "mirostat_tau": 3}):
        a = s.post("/completion", dict(drawn, **extra))
        b = s.post("/completion", dict(drawn, **extra))
        check(a[0] == b[0] == 200 and a[1]["tokens"] == b[1]["tokens"] and a[1]["tokens"],
              f"{arch}: seeded {extra}: {a} {b}")
    # the order: top-k 1 before a hot temperature is the greedy reply; without top-k in the
    # order, the same request draws from the whole vocabulary
    hot = dict(ask, temperature=5, top_k=1, seed=3)
    for order in (["top_k", "temperature"], "kt", ["temperature", "top-k"]):
        status, body = s.post("/completion", dict(hot, samplers=order))
        check(status == 200 and body["tokens"] == toks, f"{arch}: samplers {order}: {body}")
    status, body = s.post("/completion", dict(hot, samplers="t"))
    check(status == 200 and body["tokens"] != toks and
          body["generation_settings"]["samplers"] == ["temperature"],
          f"{arch}: samplers t: {body}")
    status, text = s.request("GET", "/props")
    params = json.loads(text)["default_generation_settings"]["params"]
    check(params["dry_base"] == 1.75 and params["dry_allowed_length"] == 2 and
          params["dry_penalty_last_n"] == 64 and params["mirostat_tau"] == 5 and
          params["typical_p"] == 1 and params["samplers"] == [
              "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
              "temperature"], f"{arch}: /props {params}")
    status, body = s.post("/v1/completions", {"prompt": "x", "mirostat": 5})
    check(status == 400 and "'mirostat'" in body["error"]["message"], f"{arch}: mirostat 5: {body}")


def default_grammar(moevm, model, arch):
    """`serve --grammar`: requests without a constraint of their own take it; one with its
    own takes that. A grammar that does not parse stops the server before it loads."""
    s = Server(moevm, model, "-t", "2", "--grammar", 'root ::= "[" [0-9]{1,3} "]"')
    try:
        status, body = s.post("/completion", {"prompt": "x", "n_predict": 10, "seed": 1})
        check(status == 200 and re.fullmatch(r"\[[0-9]{1,3}\]", body["content"]),
              f"{arch}: --grammar as the default: {body}")
        status, body = s.post("/completion", {"prompt": "x", "grammar": 'root ::= "ok"'})
        check(status == 200 and body["content"] == "ok", f"{arch}: a request's own: {body}")
    finally:
        s.stop()
    p = subprocess.run([moevm, "serve", "-m", model, "--port", "0", "--grammar", "root ::= ("],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and p.stderr.count("\n") == 1 and "--grammar: grammar: line 1" in
          p.stderr, f"{arch}: serve --grammar bad: rc {p.returncode} {p.stderr!r}")


def concurrent(s, arch):
    prompts = ["The king", "In the morning", "A ship sailed", "Four"]
    # replies long enough, and started together, that they overlap however slowly the
    # clients' threads start (a sanitized build decodes a tiny model's token in well under
    # a millisecond, so 12-token replies could each end before the next began)
    ask = dict(GREEDY, max_tokens=64, ignore_eos=True)
    alone = {p: s.post("/v1/completions", dict(ask, prompt=p))[1]["choices"][0]["text"]
             for p in prompts}
    got = {}
    start = threading.Barrier(2 * len(prompts))

    def client(p):
        start.wait()
        status, events, done = s.stream("/v1/completions", dict(ask, prompt=p))
        got[p] = "".join(e["choices"][0]["text"] for e in events) if done else None

    before = s.metrics()
    threads = [threading.Thread(target=client, args=(p,)) for p in prompts * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in prompts:
        check(got.get(p) == alone[p], f"{arch}: concurrent stream of {p!r}: {got.get(p)!r} "
                                      f"against {alone[p]!r}")
    # continuous batching: the three slots' tokens went through the forward pass together
    after = s.metrics()
    batches = after["moevm_batches_total"] - before["moevm_batches_total"]
    together = after["moevm_batch_requests_total"] - before["moevm_batch_requests_total"]
    check(batches > 0 and together / batches > 1.5,
          f"{arch}: {together:.0f} requests in {batches:.0f} batches: not batched together")


def disconnect(s, arch):
    before = s.metrics()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    body = json.dumps({"prompt": "Once", "max_tokens": 100000, "stream": True,
                       "temperature": 0.9, "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    sock.close()
    deadline = time.time() + 60
    m = s.metrics()
    while time.time() < deadline and m["moevm_requests_cancelled_total"] <= \
            before["moevm_requests_cancelled_total"]:
        time.sleep(0.2)
        m = s.metrics()
    check(m["moevm_requests_cancelled_total"] == before["moevm_requests_cancelled_total"] + 1,
          f"{arch}: a client gone mid-stream is cancelled")
    check(m["moevm_requests_active"] == 0, f"{arch}: its slot is free")
    status, body = s.post("/v1/completions", dict(GREEDY, prompt="Still there"))
    check(status == 200, f"{arch}: the server serves after a disconnect")


def half_close(s, arch):
    """A client that shuts down its sending side once the request is out still reads: it gets
    a whole reply, or an error, never text cut short under a 200."""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    body = json.dumps({"prompt": "Once", "max_tokens": 3000, "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    sock.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    sock.close()
    head, _, payload = got.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/") else 0
    try:
        reply = json.loads(payload)
    except ValueError:
        reply = {}
    whole = status == 200 and reply["choices"][0]["finish_reason"] == "length" and \
        reply["usage"]["completion_tokens"] == 3000
    check(whole or (status == 499 and "closed its end" in reply["error"]["message"]),
          f"{arch}: a half-closed client: {head[:40]!r} {payload[:200]!r}")


def raw_reply(s, request):
    """The status and JSON error of a request sent as raw bytes, read to the close."""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(request)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    sock.close()
    head, _, payload = got.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/") else 0
    try:
        return status, json.loads(payload)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return status, payload[:200]


def framing(s, arch):
    """Bodies the server cannot delimit for sure are refused at the headers, by name: two
    Content-Lengths that differ (request smuggling behind a proxy), a transfer coding other
    than chunked (which would otherwise wait for a body it never ends). A chunked body is
    read."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    length = str(len(body)).encode()
    status, msg = raw_reply(s, head + b"Content-Length: " + length + b"\r\nContent-Length: 2"
                            b"\r\n\r\n" + body)
    check(status == 400 and "conflicting Content-Length" in str(msg),
          f"{arch}: two Content-Lengths: {status} {msg!r}")
    status, msg = raw_reply(s, head + b"Transfer-Encoding: gzip\r\n\r\n" + body)
    check(status == 501 and "Transfer-Encoding gzip" in str(msg),
          f"{arch}: Transfer-Encoding gzip: {status} {msg!r}")
    chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    status, msg = raw_reply(s, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
    check(status == 200, f"{arch}: a chunked body: {status} {msg!r}")
    status, msg = raw_reply(s, head + b"Content-Length: " + length + b"\r\nContent-Length: " +
                            length + b"\r\n\r\n" + body)
    check(status == 200, f"{arch}: the same Content-Length twice: {status} {msg!r}")


def stop_strings(s, arch, reply):
    """A stop string taken from the greedy reply cuts it there."""
    words = [w for w in reply.split()[1:] if w.isascii() and w.isalpha()]
    if not words:
        print(f"skip: {arch}: the greedy reply {reply!r} has no plain word to stop at")
        return
    stop = words[0]
    status, body = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS, stop=[stop]))
    text = body["choices"][0]["message"]["content"]
    check(status == 200 and text == reply[:reply.index(stop)] and
          body["choices"][0]["finish_reason"] == "stop", f"{arch}: stop {stop!r}: {text!r}")


def named_events(s, path, body):
    """A stream's (event, data) pairs whose data's type is its event's name."""
    status, lines = s.stream_lines(path, body)
    events, name = [], None
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            check(data["type"] == name, f"{path}: event {name} holds {data}")
            events.append((name, data))
    return status, events


def anthropic_events(s, body):
    return named_events(s, "/v1/messages", body)


def anthropic_blocks(events):
    """The message a stream's events build, as Anthropic's SDK builds it."""
    blocks = []
    for name, d in events:
        if name == "content_block_start":
            check(d["index"] == len(blocks), f"anthropic: block {d} after {len(blocks)}")
            blocks.append(dict(d["content_block"]))
        elif name == "content_block_delta":
            b, delta = blocks[d["index"]], d["delta"]
            key = {"text_delta": "text", "thinking_delta": "thinking",
                   "input_json_delta": "partial"}[delta["type"]]
            b[key] = b.get(key, "") + delta[key if key != "partial" else "partial_json"]
    for b in blocks:
        if "partial" in b:
            b["input"] = json.loads(b.pop("partial"))
    return blocks


ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


def anthropic(s, arch):
    """Anthropic's Messages API: the same reply as the chat's, whole and streamed, in its
    blocks; its tools and tool_choice; token counting; its errors."""
    ask = {"model": "any", "max_tokens": 12, "temperature": 0, "system": "Be brief.",
           "messages": [{"role": "user", "content": "Tell me about the sea."}]}
    status, msg = s.post("/v1/messages", ask)
    status2, chat = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS))
    cm, finish = chat["choices"][0]["message"], chat["choices"][0]["finish_reason"]
    blocks = {b["type"]: b for b in msg.get("content", [])}
    check(status == status2 == 200 and msg["type"] == "message" and msg["role"] == "assistant"
          and blocks.get("text", {}).get("text", "") == (cm["content"] or "") and
          blocks.get("thinking", {}).get("thinking", "") == cm.get("reasoning_content", "") and
          msg["stop_reason"] == {"length": "max_tokens", "stop": "end_turn"}[finish] and
          msg["usage"]["output_tokens"] == chat["usage"]["completion_tokens"] and
          msg["usage"]["input_tokens"] + msg["usage"]["cache_read_input_tokens"] ==
          chat["usage"]["prompt_tokens"], f"{arch}: /v1/messages as the chat: {msg} {chat}")
    status, events = anthropic_events(s, ask)
    names = [n for n, _ in events]
    check(status == 200 and names[0] == "message_start" and names[-1] == "message_stop" and
          names[-2] == "message_delta" and anthropic_blocks(events) == msg["content"] and
          events[-2][1]["delta"]["stop_reason"] == msg["stop_reason"],
          f"{arch}: /v1/messages streamed as whole: {events} {msg}")
    status, n = s.post("/v1/messages/count_tokens", ask)
    check(status == 200 and n == {"input_tokens": chat["usage"]["prompt_tokens"]},
          f"{arch}: count_tokens: {n} {chat['usage']}")
    if arch in ("qwen3moe", "glm4moe"):  # templates writing an empty block without thinking
        status, off = s.post("/v1/messages/count_tokens",
                             dict(ask, thinking={"type": "disabled"}))
        check(status == 200 and off["input_tokens"] != n["input_tokens"],
              f"{arch}: thinking disabled: {off} {n}")
    # a history with a call and its result; a call forced by tool_choice
    history = ask["messages"] + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "get_weather",
                                           "input": {"city": "Oslo", "days": 2}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "sunny"}]}]}]
    if arch in TOOL_TEMPLATES:  # (Mixtral's template wants user and assistant in turn)
        status, n2 = s.post("/v1/messages/count_tokens", dict(ask, messages=history,
                                                              tools=ANTHROPIC_TOOLS))
        check(status == 200 and n2["input_tokens"] > n["input_tokens"],
              f"{arch}: a history with a tool call: {status} {n2}")
    if arch in FORCIBLE:
        drawn = dict(ask, temperature=1.0, top_k=0, top_p=1.0, max_tokens=300,
                     tools=ANTHROPIC_TOOLS, tool_choice={"type": "tool", "name": "search"})
        if arch in THINKING:
            drawn["thinking"] = {"type": "enabled", "budget_tokens": 4}
        status, msg = s.post("/v1/messages", drawn)
        uses = [b for b in msg.get("content", []) if b["type"] == "tool_use"]
        check(status == 200 and msg["stop_reason"] == "tool_use" and uses and
              all(u["name"] == "search" and set(u["input"]) == {"q"} for u in uses),
              f"{arch}: tool_choice names a tool: {status} {msg}")
        status, events = anthropic_events(s, drawn)
        same_ids = [dict(b, id=b["id"].replace(events[0][1]["message"]["id"][4:], msg["id"][4:]))
                    if b["type"] == "tool_use" else b for b in anthropic_blocks(events)]
        check(status == 200 and same_ids == msg["content"],
              f"{arch}: the call streamed as whole: {events} {msg}")
        status, one = s.post("/v1/messages", dict(drawn, tool_choice={
            "type": "tool", "name": "search", "disable_parallel_tool_use": True}))
        check(status == 200 and
              len([b for b in one["content"] if b["type"] == "tool_use"]) == 1,
              f"{arch}: disable_parallel_tool_use: one call: {one}")
    for bad, why in (({"messages": []}, "'messages' must be a non-empty array"),
                     ({"messages": [{"role": "user", "content": [
                         {"type": "image", "source": {"type": "url", "url": "x"}}]}]},
                      "a 'image' block"),
                     ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                      "'tools'[0]"),
                     ({"tool_choice": {"type": "sometimes"}}, "'tool_choice' must be"),
                     ({"thinking": {"type": "maybe"}}, "'thinking' must be"),
                     ({"max_tokens": "many"}, "max_tokens")):
        status, body = s.post("/v1/messages", dict(ask, **bad))
        check(status == 400 and body["type"] == "error" and
              body["error"]["type"] == "invalid_request_error" and
              why in body["error"]["message"], f"{arch}: {bad} refused: {status} {body}")


def output_of(resp):
    """A response's output as (type, its text or call) pairs, ids aside."""
    out = []
    for item in resp["output"]:
        if item["type"] == "message":
            out.append(("message", "".join(p["text"] for p in item["content"])))
        elif item["type"] == "reasoning":
            out.append(("reasoning", "".join(p["text"] for p in item["content"])))
        else:
            out.append(("function_call", item["name"], item["arguments"]))
    return out


def responses(s, arch):
    """OpenAI's Responses API: the same reply as the chat's, whole and streamed as its
    events; its tools, a history of calls, its text format; its refusals."""
    ask = {"model": "any", "instructions": "Be brief.", "input": "Tell me about the sea.",
           "max_output_tokens": 12, "temperature": 0}
    status, resp = s.post("/v1/responses", ask)
    status2, chat = s.post("/v1/chat/completions", dict(GREEDY, messages=MSGS))
    cm, finish = chat["choices"][0]["message"], chat["choices"][0]["finish_reason"]
    want = ([("reasoning", cm["reasoning_content"])] if cm.get("reasoning_content") else []) + \
        ([("message", cm["content"])] if cm["content"] else [])
    check(status == status2 == 200 and resp["object"] == "response" and
          output_of(resp) == want and
          resp["status"] == {"length": "incomplete", "stop": "completed"}[finish] and
          resp["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"] and
          resp["usage"]["output_tokens"] == chat["usage"]["completion_tokens"],
          f"{arch}: /v1/responses as the chat: {resp} {chat}")
    # token counting, as llama.cpp's server counts (after OpenAI's input_tokens)
    status, n = s.post("/v1/responses/input_tokens", ask)
    status2, n2 = s.post("/v1/chat/completions/input_tokens", dict(GREEDY, messages=MSGS))
    want_n = {"object": "response.input_tokens", "input_tokens": chat["usage"]["prompt_tokens"]}
    check(status == status2 == 200 and n == n2 == want_n, f"{arch}: input_tokens: {n} {n2}")
    status, n = s.post("/v1/responses/input_tokens", dict(ask, input=[]))
    check(status == 400 and "'input' must be" in n["error"]["message"],
          f"{arch}: input_tokens of a bad request: {status} {n}")
    status, events = named_events(s, "/v1/responses", ask)
    names = [n for n, _ in events]
    final = events[-1][1].get("response", {}) if events else {}
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    check(status == 200 and names[:2] == ["response.created", "response.in_progress"] and
          names[-1] in ("response.completed", "response.incomplete") and
          [d["sequence_number"] for _, d in events] == list(range(len(events))) and
          output_of(final) == want and text == (cm["content"] or ""),
          f"{arch}: /v1/responses streamed as whole: {events} {resp}")
    if arch in TOOL_TEMPLATES:  # a history of calls (Mixtral's template wants turns in turn)
        history = [{"role": "user", "content": "Weather?"},
                   {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                    "arguments": "{\"city\": \"Oslo\", \"days\": 2}"},
                   {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
        tools = [dict(t["function"], type="function") for t in TOOLS]
        status, r = s.post("/v1/responses", dict(ask, input=history, tools=tools))
        check(status == 200 and r["status"] in ("completed", "incomplete"),
              f"{arch}: a history of calls: {status} {r}")
    if arch in FORCIBLE:
        tools = [dict(t["function"], type="function") for t in TOOLS]
        drawn = dict(ask, temperature=1.0, top_p=1.0, max_output_tokens=300, tools=tools,
                     tool_choice={"type": "function", "name": "search"},
                     parallel_tool_calls=False)
        if arch in THINKING:  # a chat's own field (llama.cpp's), which the body carries
            drawn["reasoning_budget_tokens"] = 4
        status, r = s.post("/v1/responses", drawn)
        calls = [o for o in output_of(r) if o[0] == "function_call"]
        check(status == 200 and len(calls) == 1 and calls[0][1] == "search" and
              set(json.loads(calls[0][2])) == {"q"}, f"{arch}: a forced call: {status} {r}")
        status, events = named_events(s, "/v1/responses", drawn)
        done = [d["arguments"] for n, d in events if n == "response.function_call_arguments.done"]
        check(status == 200 and done == [c[2] for c in calls[:1]] and
              output_of(events[-1][1]["response"]) == output_of(r),
              f"{arch}: the forced call streamed: {events} {r}")
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    status, r = s.post("/v1/responses", dict(ask, temperature=1.0, max_output_tokens=200,
                                             text={"format": {"type": "json_schema",
                                                              "name": "n", "schema": schema}}))
    msg = [o[1] for o in output_of(r) if o[0] == "message"]
    check(status == 200 and (r["status"] == "incomplete" or
                             type(json.loads(msg[0])["n"]) is int),
          f"{arch}: text.format json_schema: {status} {r}")
    for bad, why in (({"previous_response_id": "resp_1"}, "keeps no responses"),
                     ({"input": []}, "'input' must be"),
                     ({"input": [{"role": "user", "content": [
                         {"type": "input_image", "image_url": "x"}]}]}, "'input_image' part"),
                     ({"tools": [{"type": "web_search"}]}, "'tools'[0]"),
                     ({"text": {"format": {"type": "yaml"}}}, "'text.format'")):
        status, body = s.post("/v1/responses", dict(ask, **bad))
        check(status == 400 and why in body["error"]["message"],
              f"{arch}: {bad} refused: {status} {body}")


def openai_client(s, arch):
    try:
        import openai
    except ImportError:
        print(f"skip: {arch}: the openai package is not installed")
        return
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none")
    parts = []
    for chunk in client.chat.completions.create(model="any", messages=MSGS, stream=True,
                                                temperature=0, max_tokens=8):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    check(isinstance("".join(parts), str), f"{arch}: the openai client's streamed chat")
    print(f"{arch}: openai client streamed {len(parts)} pieces")


def cpu_moe(moevm, model, arch):
    """--n-cpu-moe 1 of the model's layers: a budget (gpu_budget's share of the other
    layers' experts); 99: none on the GPU, said in one line, the CPU reading every expert at
    its home. The server serves either way, to the same greedy text."""
    budget, text, log = {}, {}, {}
    for n in ("1", "99"):
        s = Server(moevm, model, "--n-cpu-moe", n, "-ngl", "99", "-t", "2")
        try:
            status, body = s.post("/v1/completions", dict(GREEDY, prompt="Once upon a time"))
            text[n] = body["choices"][0]["text"] if status == 200 else None
            budget[n] = s.metrics().get("moevm_budget_bytes")
        finally:
            rc, log[n] = s.stop()
        check(rc == 0 and text[n] is not None, f"{arch}: --n-cpu-moe {n}: rc {rc}, {body}")
    check(budget["1"] and budget["1"] > 0 and budget["99"] == 0,
          f"{arch}: --n-cpu-moe budgets {budget}")
    check(text["1"] == text["99"], f"{arch}: --n-cpu-moe 1 and 99 differ: {text}")
    check("moevm serve: --n-cpu-moe 99: the experts of all" in log["99"] and
          "experts read at their homes" in log["99"], f"{arch}: --n-cpu-moe 99: {log['99']}")


def device(moevm, model, arch):
    """On the device (the cuda backend over tests/fakecuda, its kernels emulated: CTest's
    SERVE_CUDA_DRIVER and SERVE_CUDA_KERNELS), half the experts' pages resident. The engine
    runs on the server's own thread, not the one that opened the device, and must make the
    device's context that thread's: every request failed with CUDA_ERROR_INVALID_CONTEXT
    before (engine/compute/gpu.h, mvm_gpu_use)."""
    driver, kernels = os.environ.get("SERVE_CUDA_DRIVER"), os.environ.get("SERVE_CUDA_KERNELS")
    if not driver or not kernels:
        return
    env = dict(os.environ, MOEVM_BACKEND="cuda", MOEVM_CUDA_LIBRARY=driver,
               FAKECUDA_KERNELS=kernels)
    s = Server(moevm, model, "--gpu-budget", "50%", "-t", "2", env=env)
    try:
        status, body = s.post("/v1/completions", dict(GREEDY, prompt="Once upon a time"))
    finally:
        rc, log = s.stop()
    text = body["choices"][0]["text"] if status == 200 else None
    check(text and body["usage"]["completion_tokens"] > 0, f"{arch}: on the device: {body}")
    check(rc == 0 and "computing on the GPU" in log and "1 completed" in log,
          f"{arch}: on the device: rc {rc}, log {log[-600:]!r}")


def access(moevm, model, arch, work):
    """--api-key and --api-key-file (llama.cpp's server's): /health is public, every other
    route wants a key ("Authorization: Bearer KEY" or X-Api-Key) and answers 401 without
    one; a browser's CORS preflight passes without a key, and responses allow the request's
    Origin. Bad keys and key files are one line and exit 2."""
    keys = os.path.join(work, "keys.txt")
    with open(keys, "w") as f:
        f.write("# the server's keys\nfirst-key\n\n  second-key  \n")
    s = Server(moevm, model, "--api-key-file", keys, "--api-key", "third-key", "-t", "2")

    def status(method, path, headers, body=None):
        c = s.conn()
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}

    ask = json.dumps({"prompt": "Once", "n_predict": 2})
    try:
        check(status("GET", "/health", {})[0] == 200, f"{arch}: /health without a key")
        for path, method, body in (("/v1/models", "GET", None), ("/props", "GET", None),
                                   ("/completion", "POST", ask), ("/metrics", "GET", None)):
            got = [status(method, path, h, body)[0] for h in
                   ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer first-k"},
                    {"Authorization": "Bearer second-key"}, {"X-Api-Key": "third-key"},
                    {"Authorization": "first-key"})]
            check(got == [401, 401, 401, 200, 200, 200], f"{arch}: {method} {path} keys: {got}")
        code, head = status("OPTIONS", "/v1/chat/completions",
                            {"Origin": "http://ui.example",
                             "Access-Control-Request-Headers": "authorization,content-type"})
        check(code == 204 and head.get("access-control-allow-origin") == "http://ui.example" and
              "POST" in head.get("access-control-allow-methods", "") and
              head.get("access-control-allow-headers") == "authorization,content-type",
              f"{arch}: CORS preflight: {code} {head}")
        code, head = status("POST", "/completion", {"Origin": "http://ui.example",
                                                    "Authorization": "Bearer first-key"}, ask)
        check(code == 200 and head.get("access-control-allow-origin") == "http://ui.example",
              f"{arch}: CORS on a response: {code} {head}")
    finally:
        rc, log = s.stop()
    check(rc == 0 and "an API key asked for" in log, f"{arch}: --api-key: rc {rc} {log[-300:]}")
    with open(os.path.join(work, "nokeys.txt"), "w") as f:
        f.write("# none\n\n")
    for args, says in ((["--api-key", ""], "--api-key: an empty key"),
                       (["--api-key", "a b"], "--api-key: a key holds a space"),
                       (["--api-key-file", keys + ".none"], "cannot open it"),
                       (["--api-key-file", os.path.join(work, "nokeys.txt")], "no key in it")):
        p = subprocess.run([moevm, "serve", "-m", model, "--port", "0", *args],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and p.stderr.count("\n") == 1 and says in p.stderr,
              f"{arch}: serve {args}: rc {p.returncode} {p.stderr!r}")


def api_prefix(moevm, model, arch):
    """--api-prefix (llama-server's): every route under the path, none outside it; a bad
    path is one line and exit 2."""
    s = Server(moevm, model, "--api-prefix", "/api", "-to", "1", "-t", "2")
    try:
        got = [s.request("GET", path)[0] for path in
               ("/api/health", "/api/v1/models", "/v1/models", "/apix/v1/models", "/api")]
        status, body = s.post("/api/v1/chat/completions", dict(GREEDY, messages=MSGS))
        check(got == [200, 200, 404, 404, 404] and status == 200 and body["choices"],
              f"{arch}: --api-prefix /api: {got} {status}")
        # -to 1: a connection idle for a second is closed by the server
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        time.sleep(2.5)
        try:
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
            closed = sock.recv(1024) == b""
        except OSError:
            closed = True
        sock.close()
        check(closed, f"{arch}: --timeout 1: an idle connection is closed")
    finally:
        s.stop()
    p = subprocess.run([moevm, "serve", "-m", model, "--port", "0", "--api-prefix", "api/"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and p.stderr.count("\n") == 1 and "starts with '/'" in p.stderr,
          f"{arch}: --api-prefix api/: rc {p.returncode} {p.stderr!r}")


def template_file(moevm, model, arch, work):
    """--chat-template-file: the server renders chat messages with that template (one that
    raises on a given message shows it is the one in use); a missing file is one line and
    exit 2, before the model loads."""
    path = os.path.join(work, "raising.jinja")
    with open(path, "w") as f:
        f.write("{% if messages[0].content == 'boom' %}{{ raise_exception('from the file "
                "template') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")
    s = Server(moevm, model, "--chat-template-file", path, "-t", "2")
    try:
        chat = dict(GREEDY, messages=[{"role": "user", "content": "boom"}])
        status, body = s.post("/v1/chat/completions", chat)
        check(status == 400 and "from the file template" in body["error"]["message"],
              f"{arch}: --chat-template-file not in use: {status} {body}")
        chat["messages"][0]["content"] = "hello"
        status, body = s.post("/v1/chat/completions", chat)
        check(status == 200, f"{arch}: --chat-template-file, a plain message: {status} {body}")
    finally:
        s.stop()
    p = subprocess.run([moevm, "serve", "-m", model, "--port", "0", "--chat-template-file",
                        path + ".none"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and p.stderr.count("\n") == 1 and "cannot open it" in p.stderr,
          f"{arch}: --chat-template-file missing: rc {p.returncode} {p.stderr!r}")


def main():
    moevm, work = sys.argv[1], sys.argv[2]
    arches = sys.argv[3:] or ["qwen3moe"]
    os.makedirs(work, exist_ok=True)
    for arch in arches:
        model = os.path.join(work, f"tiny-{arch}.gguf")
        if not os.path.exists(model):
            subprocess.run([moevm, "mkmodel", "--preset", "tiny", "--arch", arch, "-o", model],
                           check=True, capture_output=True)
        # a context long enough that the disconnected stream cannot reach its end (and be
        # completed rather than cancelled) before the server notices the client is gone
        s = Server(moevm, model, "-np", "3", "-c", "4096", "-t", "2")
        try:
            reply = basics(s, arch)
            llama_api(s, arch)
            infill(s, arch)
            logprobs(s, moevm, model, arch, work)
            errors(s, arch)
            grammars(s, arch)
            sampling(s, arch)
            tools(s, arch)
            framing(s, arch)
            concurrent(s, arch)
            disconnect(s, arch)
            half_close(s, arch)
            stop_strings(s, arch, reply)
            anthropic(s, arch)
            responses(s, arch)
            openai_client(s, arch)
            m = s.metrics()
            check(m["moevm_requests_total"] > 10 and m["moevm_expert_accesses_total"] > 0,
                  f"{arch}: /metrics counts {m}")
        finally:
            rc, log = s.stop()
        check(rc == 0 and "served" in log and "requests" in log, f"{arch}: SIGTERM: rc {rc}, "
                                                                 f"log {log[-300:]!r}")
        if arch == arches[0]:
            cpu_moe(moevm, model, arch)
            device(moevm, model, arch)
            template_file(moevm, model, arch, work)
            default_grammar(moevm, model, arch)
            access(moevm, model, arch, work)
            api_prefix(moevm, model, arch)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
