#!/usr/bin/env python3
"""Decode tokens/s of a llama-completion run, read from its timings (standard input), with
the sampler's time counted: llama.cpp's "eval time" line is llama_decode's alone and its
"sampling time" is printed apart, where `moevm run`'s decode rate times the loop that
samples and evaluates. So the rate is the eval runs over eval time plus sampling time (the
sampling of the first token, after the prompt, included: moevm's loop has it too). Prints
0 when the lines are missing."""
import re
import sys

text = sys.stdin.read()
ev = re.findall(r"\beval time =\s*([0-9.]+) ms /\s*([0-9]+) runs", text)
sm = re.findall(r"\bsampling time =\s*([0-9.]+) ms", text)
if not ev or not sm:
    print(0)
else:
    ms, runs = float(ev[-1][0]), int(ev[-1][1])
    print(round(runs * 1000.0 / (ms + float(sm[-1])), 2))
