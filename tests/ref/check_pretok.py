#!/usr/bin/env python3
"""The pre-tokenizers (engine/tokenizer/tok_regex.c) against the regexes themselves.

Each pre-tokenizer is written here as its list of regexes, as llama.cpp and the models'
tokenizer.json files give them, for Python's re: \\p{L}, \\p{N}, \\p{M}, \\p{P}, \\p{S} and
the letter categories become classes built from unicodedata, \\p{Han} one built from Perl's
\\p{Script=Han} (unicodedata has no scripts), \\s llama.cpp's whitespace set and $ (which in
re also matches before a final newline) \\Z; Kimi K2's class intersections are computed.
A pre-tokenizer cuts every piece the earlier regexes left into the matches and the text
between them, as Hugging Face's Split("isolated") does. Thousands
of random texts, drawn from characters at the edges of every class and regex (and, where
this Python's Unicode is the 14.0 of the tables, from anywhere), are cut by both, and the
cuts must be the same.

With the same Unicode version it also compares engine/tokenizer/tok_unicode_tables.inc (through
tok_cp_class, tok_letter_case and tok_cp_is_han) with unicodedata and Perl for every code
point.

    check_pretok.py --dump build/tests/pretok_dump [--count N] [--seed S]
"""
import argparse
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata

TABLES_UNICODE = "14.0.0"

WHITESPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
              (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
              (0x3000, 0x3000)]


# The general category of every code point ("Lu", "Nd", ...).
CATEGORY = [unicodedata.category(chr(cp)) for cp in range(0x110000)]
MAJOR = [c[0] for c in CATEGORY]

# Perl prints its Unicode version, then "1" for every code point of the Han script, else "0".
PERL_HAN = ('print Unicode::UCD::UnicodeVersion(), "\\n";'
            ' print chr($_) =~ /\\p{Script=Han}/ ? 1 : 0 for 0 .. 0x10FFFF')


def perl_han():
    """(Perl's Unicode version, a list of 0/1 per code point: in the Han script)."""
    out = subprocess.run(["perl", "-CS", "-MUnicode::UCD", "-e", PERL_HAN],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return out[0], [c == "1" for c in out[1]]


PERL_UNICODE, HAN = perl_han()


def runs_of(inside):
    """The code points for which inside(cp) holds, as (first, last) runs."""
    runs = itertools.groupby(range(0x110000), key=inside)
    return [(r[0], r[-1]) for k, r in ((k, list(g)) for k, g in runs) if k]


def category_ranges(major):
    """The code points of one major category as (first, last) runs."""
    return runs_of(lambda cp: MAJOR[cp] == major)


def body(ranges):
    """The inside of a character class for the ranges."""
    return "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}"
                   for lo, hi in ranges)


def patterns():
    L, N, M, P, S = (body(category_ranges(k)) for k in "LNMPS")
    ws = body(WHITESPACE)
    s, nots = f"[{ws}]", f"[^{ws}]"
    gpt2 = (f"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{ws}{L}{N}]+"
            f"|{s}+(?!{nots})|{s}+")

    def qwen(digits):
        return (f"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
                f"|[^\\r\\n{L}{N}]?[{L}]+|[{N}]{digits}| ?[^{ws}{L}{N}]+[\\r\\n]*"
                f"|{s}*[\\r\\n]+|{s}+(?!{nots})|{s}+")

    # DeepSeek-LLM's letters, from its tokenizer.json (llama.cpp's DEEPSEEK_LLM list);
    # written with escapes where a copy might normalise them (U+1F7D, U+1FBE, U+1FD3,
    # U+1FDB, U+2126, U+212A are canonically equivalent to other characters).
    ds_letters = ("A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿ"
                  "ᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝ\u1f5f-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌ\u1fd0-\u1fd3"
                  "\u1fd6-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳ"
                  "Ꙁ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ\U00010400-\U0001044f\U000104b0-\U000104d3"
                  "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
                  "\U000118a0-\U000118df\U0001e900-\U0001e943")
    ds_cjk = "[一-龥ࠀ-一가-퟿]+"
    # Kimi K2 (Moonshot's pat_str): CAP = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]],
    # LOW = [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]; re's (?i) folds long s to s as tiktoken's.
    han = body(runs_of(lambda cp: HAN[cp]))
    cap = body(runs_of(lambda cp: not HAN[cp] and (CATEGORY[cp] in ("Lu", "Lt", "Lm", "Lo")
                                                   or MAJOR[cp] == "M")))
    low = body(runs_of(lambda cp: not HAN[cp] and (CATEGORY[cp] in ("Ll", "Lm", "Lo")
                                                   or MAJOR[cp] == "M")))
    k2_tail = "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    # o200k (tiktoken's o200k_base): the same words with Han among the letters
    o_cap = body(runs_of(lambda cp: CATEGORY[cp] in ("Lu", "Lt", "Lm", "Lo") or MAJOR[cp] == "M"))
    o_low = body(runs_of(lambda cp: CATEGORY[cp] in ("Ll", "Lm", "Lo") or MAJOR[cp] == "M"))
    return {
        "gpt2": [gpt2],
        "default": [f"[{P}\\$\\+<=>\\^~\\|]+", gpt2, f"[{N}]+", "[0-9][0-9][0-9]"],
        "qwen2": [qwen("")],
        "llama3": [qwen("{1,3}")],
        "deepseek-llm": ["[\\r\\n]", f"{s}?[{ds_letters}]+",
                         f"{s}?[!-/:-~！-／：-～‘-‟　-。]+", f"{s}+\\Z", ds_cjk, f"[{N}]+"],
        "deepseek-coder": ["[\\r\\n]", f"{s}?[{L}]+", f"{s}?[{P}]+", ds_cjk, f"[{N}]"],
        "deepseek-v3": [f"[{N}]{{1,3}}", "[一-龥぀-ゟ゠-ヿ]+",
                        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
                        f"|[^\\r\\n{L}{P}{S}]?[{L}{M}]+| ?[{P}{S}]+[\\r\\n]*"
                        f"|{s}*[\\r\\n]+|{s}+(?!{nots})|{s}+"],
        "kimi-k2": [f"[{han}]+|[^\\r\\n{L}{N}]?[{cap}]*[{low}]+{k2_tail}"
                    f"|[^\\r\\n{L}{N}]?[{cap}]+[{low}]*{k2_tail}|[{N}]{{1,3}}"
                    f"| ?[^{ws}{L}{N}]+[\\r\\n]*|{s}*[\\r\\n]+|{s}+(?!{nots})|{s}+"],
        "gpt-4o": [f"[^\\r\\n{L}{N}]?[{o_cap}]*[{o_low}]+{k2_tail}"
                   f"|[^\\r\\n{L}{N}]?[{o_cap}]+[{o_low}]*{k2_tail}|[{N}]{{1,3}}"
                   f"| ?[^{ws}{L}{N}]+[\\r\\n/]*|{s}*[\\r\\n]+|{s}+(?!{nots})|{s}+"],
    }


def cut(regexes, text):
    pieces = [text] if text else []
    for rx in regexes:
        out = []
        for piece in pieces:
            at = 0
            for m in rx.finditer(piece):
                assert m.end() > m.start(), "an empty match"
                if m.start() > at:
                    out.append(piece[at:m.start()])
                out.append(m.group())
                at = m.end()
            if at < len(piece):
                out.append(piece[at:])
        pieces = out
    return pieces


# Characters at the edges of the classes and regexes: ASCII of every kind, contractions'
# letters, letters in and out of DeepSeek-LLM's set (Armenian and Georgian small letters
# are out), marks, numbers of every kind, punctuation and symbols (ASCII's '~' is one),
# the CJK ranges and just past them, fullwidth forms, every whitespace, format and
# private-use characters, and emoji.
POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + list("sStTmMdDlLrReEvV'''")
        + [" "] * 12 + ["\t", "\n", "\r", "\x0b", "\x0c", "\x00", "\x1f", "\x7f"]
        + list("éßÀöøƻʔΩωжԱաႠაᏸᲐᵸᵹꭰſ") + ["\u1f7d", "\u1fbe", "\u2126", "\u212a", "\u02bc"]
        + ["\u0301", "\u0300", "\u094d", "\u0903", "\u20dd"] + list("क٣½²Ⅷ〇𝟘")
        + list("—…‘’“”„‟«»¡¿、。「」・")
        + list("€©™→∑😀🎉") + ["\ufffd"]
        + list("中文一龥\u9fa6\u9fff㐀あカーｶ한가\ud7a3\ud7b0\u0800\u07ff\u4e00\u3040\u30ff")
        + list("ＡｚＺ！／：～｀０")
        + ["\u00a0", "\u2003", "\u3000", "\u0085", "\u2028", "\u202f", "\u1680"]
        + ["\u200b", "\ufeff", "\ue000", "\u0600"]
        # Kimi K2: cased letters of other scripts, titlecase, modifier and other letters,
        # Han at the script's edges (radicals, iteration marks, Hangzhou numerals, the old
        # Chinese marks, extensions, the compatibility ideographs) and just past them.
        + list("ÉéΣσЖжǅǈᾈʰʼªאกー々〆〇〡〸〻〼ⅰↀ")
        + ["\u2e80", "\u2e99", "\u2e9a", "\u2f00", "\u2fd5", "\u3006", "\u303c",
           "\u4dbf", "\u4dc0", "\u9fff", "\ua000", "\uf900", "\ufa6d", "\ufa6e",
           "\ufa70", "\U00016fe2", "\U00016fe3", "\U00016fe4", "\U00016ff0",
           "\U00020000", "\U0002a6df", "\U0002a6e0", "\U0003134a", "\U0003134b"])


def random_text(rng, anywhere):
    n = rng.choice((0, 1, 2, 3, 5, 8, 13, 21, 34))
    out = []
    for _ in range(n):
        if anywhere and rng.random() < 0.1:
            cp = rng.randrange(0x80, 0x110000)
            out.append(chr(cp) if not 0xD800 <= cp <= 0xDFFF else "x")
        elif rng.random() < 0.15:
            out.append(rng.choice(("'s", "'LL", "'ve", "  ", "\r\n", "123456", " 12", "Hello",
                                   " world", "~~", " ~~", "(x", "a.b", "中文字", "한국어",
                                   "getUserName", "HTTPServer", "iPhone", "ABC", "'S",
                                   "'\u017f", "e\u0301", "Ǆǅǆ", "日本語テキスト", " */\n/",
                                   "aÉ", "中Ab")))
        else:
            out.append(rng.choice(POOL))
    return "".join(out)


def check_classes(dump):
    digit = {"L": ord("1"), "N": ord("2"), "M": ord("4"), "P": ord("5"), "S": ord("6")}
    want = bytearray(digit.get(m, ord("0")) for m in MAJOR)
    for lo, hi in WHITESPACE:
        want[lo:hi + 1] = b"3" * (hi - lo + 1)
    got = subprocess.run([dump, "--classes"], capture_output=True, check=True).stdout
    if got != bytes(want):
        bad = [i for i in range(0x110000) if got[i:i + 1] != want[i:i + 1]]
        print(f"FAIL classes: {len(bad)} code points differ, e.g. "
              + ", ".join(f"U+{c:04X} {got[c:c + 1].decode()}!={want[c:c + 1].decode()}"
                          for c in bad[:8]))
        return False
    case = {"Lu": 1, "Lt": 1, "Ll": 2, "Lm": 3, "Lo": 3}
    want = bytes(ord("0") + case.get(c, 0) + 4 * h for c, h in zip(CATEGORY, HAN))
    got = subprocess.run([dump, "--cases"], capture_output=True, check=True).stdout
    if got != want:
        bad = [i for i in range(0x110000) if got[i:i + 1] != want[i:i + 1]]
        print(f"FAIL letter cases and Han: {len(bad)} code points differ, e.g. "
              + ", ".join(f"U+{c:04X} {got[c:c + 1].decode()}!={want[c:c + 1].decode()}"
                          for c in bad[:8]))
        return False
    print("ok   classes, letter cases and Han of all 1114112 code points")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", required=True, help="the pretok_dump binary")
    ap.add_argument("--count", type=int, default=20000, help="random texts per pre-tokenizer")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    same_unicode = unicodedata.unidata_version == PERL_UNICODE == TABLES_UNICODE
    ok = check_classes(args.dump) if same_unicode else True
    if not same_unicode:
        print(f"note: Python's Unicode is {unicodedata.unidata_version}, Perl's "
              f"{PERL_UNICODE}, the tables' {TABLES_UNICODE}: classes not compared, random "
              f"texts from the pool only")
    rng = random.Random(args.seed)
    texts = [random_text(rng, same_unicode) for _ in range(args.count)]
    encoded = [t.encode("utf-8") for t in texts]
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        for e in encoded:
            f.write(b"%d\n" % len(e) + e)
    try:
        for name, regexes in patterns().items():
            compiled = [re.compile(r) for r in regexes]
            got = subprocess.run([args.dump, name, f.name], capture_output=True, text=True,
                                 check=True).stdout.split("\n")
            bad = 0
            for i, text in enumerate(texts):
                want = " ".join(str(len(p.encode("utf-8"))) for p in cut(compiled, text))
                if got[i] != want:
                    bad += 1
                    if bad <= 5:
                        print(f"FAIL {name}: {text!r}\n  engine {got[i]}\n  regex  {want}")
            print(f"{'ok  ' if not bad else 'FAIL'} {name}: {len(texts) - bad}/{len(texts)} "
                  f"texts cut as the regexes cut them")
            ok &= not bad
    finally:
        os.unlink(f.name)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
