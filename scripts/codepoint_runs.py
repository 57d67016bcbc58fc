"""The one helper the Unicode table generators (gen_case_tables.py, gen_unicode_tables.py)
share: a property of code points as the maximal runs where it holds, the form the C tables
search by bisection."""


def runs(inside, first=0):
    """[(lo, hi)]: the maximal runs of code points from `first` up to U+10FFFF for which
    inside(cp) holds."""
    out, start = [], None
    for cp in range(first, 0x110001):
        now = cp <= 0x10FFFF and inside(cp)
        if now and start is None:
            start = cp
        elif not now and start is not None:
            out.append((start, cp - 1))
            start = None
    return out
