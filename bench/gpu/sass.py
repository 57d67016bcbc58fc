#!/usr/bin/env python3
"""The memory operations of each function in a cuobjdump -sass listing, in program order, with
runs compressed ("LDGx44 STGx4 BAR LDx16 SHFLx10 ..."): where a kernel's loads go out
together and where each waits behind a store (LDG STG LDG STG ...) or goes one round trip at a
time. bench/gpu/sass.sh makes the listing.

    python3 bench/gpu/sass.py LISTING.sass [FUNCTION...]"""
import re
import sys

KEEP = ("LDG", "LDS", "LD", "STG", "STS", "ST", "BAR", "SHFL", "EXIT")


def summary(body):
    ops = []
    for line in body.split("\n"):
        m = re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9.]+)", line)
        if m and m.group(1).split(".")[0] in KEEP:
            op = m.group(1).split(".")[0]
            if ops and ops[-1][0] == op:
                ops[-1][1] += 1
            else:
                ops.append([op, 1])
    return " ".join(f"{o}x{n}" if n > 1 else o for o, n in ops)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    text = open(argv[1]).read()
    want = set(argv[2:])
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name, body = part.split("\n", 1)
        if not want or name.strip() in want:
            print(f"{name.strip()}: {summary(body)}")


if __name__ == "__main__":
    main(sys.argv)
