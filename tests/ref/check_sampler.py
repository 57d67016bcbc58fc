#!/usr/bin/env python3
"""The sampler's draws against llama.cpp's sampler chain, written again here in NumPy.

Each step follows llama.cpp's src/llama-sampler.cpp (penalties, DRY, top-n-sigma, top-k,
typical, top-p, min-p, XTC, the temperature with its dynamic range, Mirostat 1 and 2), not
moevm's code: DRY's repeats are found by brute force instead of the Z-algorithm, the sorts
are NumPy's. Random cases (small vocabularies, histories with repeats, a random subset of
the steps on, in llama.cpp's order or an order of their own) are run through
tests/sampler_draws.c, and:
  - a case's draws follow the distribution the chain leaves (chi-square; a token the chain
    drops, drawn even once, fails); XTC, which acts with a probability, is the mixture of
    the chain with and without it;
  - the distribution mvm_sampler_last_probs reports for a draw is the chain's, to float
    precision (with XTC, the chain's with it or without it, as the draw went);
  - Mirostat's draws, one after another, are each among the tokens its state allows at
    that step, and the surprise they average comes near its target tau.
A case whose outcome hangs on a rounding (a cumulative sum within 1e-4 of its bound) is
drawn again, so that float and double arithmetic cannot tell the two apart.
"""
import argparse
import json
import math
import subprocess
import sys

import numpy as np


class Boundary(Exception):
    """The case sits on a step's bound: float rounding could go either way."""


def near(a, b):
    if abs(a - b) < 1e-4 * max(1.0, abs(b)):
        raise Boundary()


def penalties(l, prev, p):
    last = p.get("repeat_last_n", 0)
    window = prev[-last:] if last else []
    rp = p.get("repeat_penalty", 0) or 1.0
    for t, c in zip(*np.unique(np.array(window, dtype=np.int64), return_counts=True)):
        x = l[t]
        x = x * rp if x <= 0 else x / rp
        l[t] = x - (c * p.get("frequency_penalty", 0) + p.get("presence_penalty", 0))


def dry(l, prev, p):
    mult, last = p.get("dry_multiplier", 0), p.get("dry_last_n", 0)
    if mult == 0 or last == 0:
        return
    base, allowed = p.get("dry_base", 0) or 1.75, p.get("dry_allowed_length", 0)
    h = prev[-last:]
    w = len(h)
    if w <= allowed:
        return
    longest = {}
    for e in range(w - 1):  # an earlier occurrence ending at h[e], followed by h[e + 1]
        n = 0
        while n <= e and h[e - n] == h[w - 1 - n]:
            n += 1
        if n >= allowed:
            t = h[e + 1]
            longest[t] = max(longest.get(t, -1), n)
    cap = int(88.7228391 / math.log(base)) if base > 1.000001 else 0
    for t, n in longest.items():
        if 0 <= t < len(l):
            e = n - allowed
            l[t] -= mult * base ** (min(e, cap) if cap > 0 else e)


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def order(ids, l):
    """Descending logit, then ascending id (the sampler's tie order)."""
    return sorted(ids, key=lambda i: (-l[i], i))


STEPS = ["penalties", "dry", "top_n_sigma", "top_k", "typical", "top_p", "min_p", "xtc",
         "temperature"]  # llama.cpp's default order; sampler_draws takes index + 1


def f32(x):
    """The sampler's row is float: a changed logit is rounded to it."""
    return float(np.float32(x))


def filter_step(step, l, ids, p, xtc_on):
    """The candidates a filter step leaves, in some order."""
    keep = max(p.get("min_keep", 0), 1)
    if step == "top_n_sigma":
        sigma = p.get("top_n_sigma", 0)
        if sigma > 0 and len(ids) > 1:
            v = np.array([l[i] for i in ids])
            floor = v.max() - sigma * v.std()
            for x in v:
                near(x, floor)
            ids = [i for i in ids if l[i] >= floor]
    elif step == "top_k":
        k = p.get("top_k", 0)
        if 0 < k < len(ids):
            ids = order(ids, l)[:k]
    elif step == "typical":
        typ = p.get("typical_p", 0) or 1.0
        if typ < 1:
            ids = order(ids, l)
            pr = softmax(np.array([l[i] for i in ids]))
            ent = -(pr * np.log(pr)).sum()
            dist = np.abs(-np.log(pr) - ent)
            rank = sorted(range(len(ids)), key=lambda r: (dist[r], r))
            cum, cut = 0.0, len(ids)
            for j, r in enumerate(rank):
                cum += pr[r]
                near(cum, typ)
                if cum > typ and j + 1 >= keep:
                    cut = j + 1
                    break
            ids = [ids[r] for r in rank[:cut]]
    elif step == "top_p":
        top_p = p.get("top_p", 0) or 1.0
        if top_p < 1:
            ids = order(ids, l)
            cum = np.cumsum(softmax(np.array([l[i] for i in ids])))
            for c in cum:
                near(c, top_p)
            ids = ids[:next((j + 1 for j in range(len(ids)) if cum[j] >= top_p and j + 1 >= keep),
                            len(ids))]
    elif step == "min_p":
        min_p = p.get("min_p", 0)
        if min_p > 0:
            floor = max(l[i] for i in ids) + math.log(min_p)
            for i in ids:
                near(l[i], floor)
            kept = [i for i in ids if l[i] >= floor]
            ids = kept if len(kept) >= keep else order(ids, l)[:keep]
    elif step == "xtc" and xtc_on and len(ids) >= 2:
        ids = order(ids, l)
        pr = softmax(np.array([l[i] for i in ids]))
        thr = p["xtc_threshold"]
        for x in pr:
            near(x, thr)
        last = 0
        while last + 1 < len(ids) and pr[last + 1] >= thr:
            last += 1
        if last > 0 and len(ids) - last >= keep:
            ids = ids[last:]
    return ids


def temperature(l, ids, p):
    """The temperature step's temperature: p's, or the dynamic one."""
    t, rng = p["temperature"], p.get("dynatemp_range", 0)
    if rng > 0 and len(ids) > 1:
        pr = softmax(np.array([l[i] for i in ids]))
        ent = -(pr[pr > 0] * np.log(pr[pr > 0])).sum()
        lo, hi = max(0.0, t - rng), t + rng
        t = lo + (hi - lo) * (ent / math.log(len(ids))) ** (p.get("dynatemp_exponent", 0) or 1)
    return t


def final(case, xtc_on):
    """The probability of each token in the draw, the steps taken in the case's order."""
    p, prev = case["params"], case["prev"]
    l = np.array(case["logits"], dtype=np.float32).astype(np.float64)
    steps = [STEPS[i - 1] for i in p.get("order", [])] or STEPS
    ids, t_draw = None, 1.0
    for k, step in enumerate(steps):
        if step in ("penalties", "dry"):
            (penalties if step == "penalties" else dry)(l, prev, p)
            l = np.array([f32(x) for x in l])
            continue
        if ids is None:
            ids = [i for i in range(len(l)) if l[i] > -math.inf]
        if step != "temperature":
            ids = filter_step(step, l, ids, p, xtc_on)
            continue
        t = temperature(l, ids, p)
        if k == len(steps) - 1:
            t_draw = t
        elif t <= 0:
            ids = order(ids, l)[:1]
        else:
            for i in ids:
                l[i] = f32(l[i] / t)
    if ids is None:
        ids = [i for i in range(len(l)) if l[i] > -math.inf]
    out = np.zeros(len(l))
    if t_draw <= 0:  # a dynamic temperature of 0: the best left
        out[order(ids, l)[0]] = 1
    else:
        out[ids] = softmax(np.array([l[i] for i in ids]) / t_draw)
    return out


def expected(case):
    p = case["params"]
    xp = p.get("xtc_probability", 0)
    if xp > 0 and p.get("xtc_threshold", 0) <= 0.5:
        return (1 - xp) * final(case, False) + xp * final(case, True)
    return final(case, False)


def last_ok(case, res):
    """The distribution the first draw was made from (mvm_sampler_last_probs) is the chain's,
    to float precision: with XTC on, the chain's with it or without it."""
    last = res.get("last", {})
    got = np.zeros(len(case["logits"]))
    for i, q in zip(last.get("ids", []), last.get("probs", [])):
        got[i] = q
    p = case["params"]
    xp = p.get("xtc_probability", 0) > 0 and p.get("xtc_threshold", 0) <= 0.5
    wants = [final(case, False)] + ([final(case, True)] if xp else [])
    t = last.get("token", -1)
    ok = any(np.abs(got - w).max() < 2e-4 for w in wants) and 0 <= t < len(got) and \
        got[t] > 0 and abs(last["chosen"] - got[t]) < 1e-6 and \
        list(last["ids"]) == sorted(last["ids"], key=lambda i: (-got[i], i))
    if not ok:
        print(f"last draw's distribution {np.round(got, 4).tolist()} (drew {t}, "
              f"chosen {last.get('chosen')}); want {[np.round(w, 4).tolist() for w in wants]}: "
              f"{json.dumps(p)}")
    return ok


def chi_square(counts, want):
    n = sum(counts)
    chi, dof = 0.0, -1
    for c, w in zip(counts, want):
        if w == 0:
            if c:
                return math.inf, 1
            continue
        e = w * n
        chi += (c - e) ** 2 / e
        dof += 1
    return chi, max(dof, 1)


def random_case(r):
    n = int(r.integers(6, 14))
    p = {"temperature": float(r.choice([0.5, 0.8, 1.0, 1.5])), "seed": int(r.integers(1 << 30))}
    steps = r.random(12) < 0.35
    if steps[0]:
        p.update(repeat_last_n=int(r.integers(1, 40)), repeat_penalty=float(r.uniform(1, 1.6)))
    if steps[1]:
        p.update(repeat_last_n=p.get("repeat_last_n") or int(r.integers(1, 40)),
                 frequency_penalty=float(r.uniform(-0.5, 1)),
                 presence_penalty=float(r.uniform(-0.5, 1)))
    if steps[2]:
        p.update(dry_multiplier=float(r.uniform(0.2, 1.5)), dry_base=float(r.uniform(1.1, 2)),
                 dry_allowed_length=int(r.integers(0, 4)), dry_last_n=int(r.integers(4, 40)))
    if steps[3]:
        p["top_n_sigma"] = float(r.uniform(0.5, 2.5))
    if steps[4]:
        p["top_k"] = int(r.integers(1, n))
    if steps[5]:
        p["typical_p"] = float(r.uniform(0.3, 0.95))
    if steps[6]:
        p["top_p"] = float(r.uniform(0.3, 0.95))
    if steps[7]:
        p["min_p"] = float(r.uniform(0.02, 0.3))
    if steps[8]:
        p.update(xtc_probability=float(r.uniform(0.3, 1)),
                 xtc_threshold=float(r.uniform(0.05, 0.3)))
    if steps[9]:
        p.update(dynatemp_range=float(r.uniform(0.1, 1.2)),
                 dynatemp_exponent=float(r.choice([0.5, 1.0, 2.0])))
    if steps[10]:
        p["min_keep"] = int(r.integers(1, 4))
    if r.random() < 0.3:  # an order of its own: some of the steps, shuffled, some twice
        k = int(r.integers(1, 10))
        p["order"] = [int(x) + 1 for x in r.choice(9, size=k, replace=bool(r.random() < 0.3))]
    logits = (r.normal(0, 1.5, n)).round(3).tolist()
    prev = r.integers(0, n, int(r.integers(0, 40))).tolist()
    if r.random() < 0.5 and len(prev) > 6:  # a repeated stretch, for DRY
        k = int(r.integers(2, 6))
        prev += prev[-k - 3:-3] + prev[-k - 3:-3]
    return {"params": p, "logits": logits, "prev": prev, "draws": 20000}


def mirostat_ok(case, seq):
    """Each draw allowed by the state then, mu followed (a float, as the sampler keeps it); the
    mean surprise near tau. A token whose surprise is within 1e-6 of mu may fall either side."""
    p = case["params"]
    l = np.array(case["logits"], dtype=np.float32).astype(np.float64)
    tau, eta = f32(p.get("mirostat_tau", 0) or 5.0), f32(p.get("mirostat_eta", 0) or 0.1)
    ids = order(range(len(l)), l)
    pr = softmax(np.array([l[i] for i in ids]) / p["temperature"])
    mu, surprises = f32(2 * tau), []
    for t in seq:
        if p["mirostat"] == 1:
            m = 100
            tb = sum(math.log((i + 2) / (i + 1)) * math.log(pr[i] / pr[i + 1])
                     for i in range(min(m - 1, len(ids) - 1)))
            tt = sum(math.log((i + 2) / (i + 1)) ** 2 for i in range(min(m - 1, len(ids) - 1)))
            s_hat = tb / tt
            eps = s_hat - 1
            k = (eps * 2 ** mu / (1 - len(l) ** -eps)) ** (1 / s_hat)
            kept = min(len(ids), max(int(k), 1)) if k == k else 1
        else:
            kept = next((j for j in range(len(ids)) if -math.log2(pr[j]) > mu), len(ids)) or 1
            while kept < len(ids) and ids[kept] == t and -math.log2(pr[kept]) - mu < 1e-6:
                kept += 1
        allowed = ids[:kept]
        if t not in allowed:
            print(f"mirostat {p['mirostat']}: token {t} drawn where only {allowed} were allowed "
                  f"(mu {mu:.6f}, its surprise {-math.log2(pr[ids.index(t)]):.6f})")
            return False
        q = pr[ids.index(t)] / pr[:kept].sum()
        surprises.append(-math.log2(q))
        mu = f32(mu - f32(eta * f32(surprises[-1] - tau)))
    half = surprises[len(surprises) // 2:]
    mean = sum(half) / len(half)
    if abs(mean - tau) > 0.25 * tau:
        print(f"mirostat {p['mirostat']}: mean surprise {mean:.3f} against tau {tau}")
        return False
    return True


def mirostat_cases(r):
    out = []
    for version in (1, 2):
        for tau in (1.5, 3.0):
            n = 200
            # Zipf-like logits, as Mirostat 1 assumes
            logits = (-1.1 * np.log(np.arange(1, n + 1)) + r.normal(0, 0.05, n))
            perm = r.permutation(n)
            out.append({"params": {"temperature": 1.0, "seed": int(r.integers(1 << 30)),
                                   "mirostat": version, "mirostat_tau": tau,
                                   "mirostat_eta": 0.1},
                        "logits": logits[perm].round(4).tolist(), "prev": [],
                        "draws": 3000, "sequence": True})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", required=True, help="tests/sampler_draws")
    ap.add_argument("--cases", type=int, default=300)
    a = ap.parse_args()
    r = np.random.default_rng(20261202)
    cases, want = [], []
    while len(cases) < a.cases:
        c = random_case(r)
        try:
            want.append(expected(c))
        except Boundary:
            continue
        cases.append(c)
    miro = mirostat_cases(r)
    text = "".join(json.dumps(c) + "\n" for c in cases + miro)
    run = subprocess.run([a.draws], input=text, capture_output=True, text=True, check=True)
    results = [json.loads(x) for x in run.stdout.splitlines()]
    fails = 0
    for c, w, res in zip(cases, want, results):
        if "counts" not in res:
            print("refused:", res, c["params"])
            fails += 1
            continue
        if not last_ok(c, res):
            fails += 1
        if sum(res["counts"]) != c["draws"]:
            fails += 1
            print(f"{c['draws'] - sum(res['counts'])} draws were no token of the row "
                  f"({res['draws_out_of_range'][:5]}...): {json.dumps(c['params'])}")
            continue
        chi, dof = chi_square(res["counts"], w)
        # the 99.9999th percentile of chi-square (Wilson-Hilferty): a false alarm in
        # about one run of 3,000
        limit = dof * (1 - 2 / (9 * dof) + 4.753 * math.sqrt(2 / (9 * dof))) ** 3
        if chi > limit:
            fails += 1
            print(f"chi-square {chi:.1f} over {dof} degrees of freedom (limit {limit:.1f}): "
                  f"{json.dumps(c['params'])}\n  want {np.round(w, 4).tolist()}\n"
                  f"  got  {res['counts']}")
    for c, res in zip(miro, results[len(cases):]):
        if "seq" not in res or not mirostat_ok(c, res["seq"]):
            fails += 1
    print(f"{len(cases)} chains and {len(miro)} Mirostat runs: {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
