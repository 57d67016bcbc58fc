"""The engine's logits under expert substitution against the NumPy reference (moe_ref.py).

    /usr/bin/python3 tests/ref/check_route.py --moevm build/moevm --workdir DIR

`moevm run --route importance{alpha=1}` with a device budget of 30% of the experts lets
SMoE's route module run a resident expert in place of a selected one that is not
(policy/route_importance.c). That changes the model's output, so the exact reference
of check_forward.py no longer applies; instead the routing trace (--trace-out) records, for
every substituted (token, layer), the experts that ran and their weights ("ran",
"ran_weights"), and the reference is run with exactly those rows overridden and every
other row routed by itself. The engine's logits must then agree with it as closely as
check_forward.py demands of the exact model (F32 weights: relative row error <= 1e-4).

Which rows get substituted depends on what is resident when a layer routes, which on the
host backend depends on copy timing; so the check requires some substitutions to have
happened (or it would prove nothing) rather than a given number.

Sensitivity: the same logits against the reference without the overrides (the engine
ignoring the substitution) and with the overrides' weights replaced by the weights of the
experts they replaced (the engine not rescaling them) must differ by a wide margin.

Exit status: 0 pass, 1 any failure (with the reason), 77 NumPy not importable (skipped).
"""

import argparse
import json
import os
import sys

try:
    import numpy as np
except ImportError:
    print("skip: check_route: NumPy is not importable")
    sys.exit(77)

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_forward as cf  # noqa: E402
import moe_ref  # noqa: E402

# Mixtral (renormalised top-k), Qwen2-MoE (raw probabilities, shared expert), OLMoE,
# DeepSeek-V2-Lite's kind (a dense block first: the traces count the MoE layers), GLM-4.5
# (sigmoid, a choosing bias, x2.5, a NextN block after the layers).
ARCHS = ("llama", "qwen2moe", "olmoe", "deepseek2", "glm4moe")
TOL = cf.TOL["f32"][1]
PROMPT_LENGTH = 16
N_GEN = 48
ROUTE = "importance{alpha=1}"


def read_trace(path, k, scores):
    """{(tok, layer): record} of the trace's records, checking the header's kind of scores
    and the substituted records' shape."""
    records = {}
    with open(path, encoding="utf-8") as f:
        header = json.loads(f.readline())
        if header.get("format") != "moevm-trace":
            raise cf.Failure(f"{path}: not a moevm trace")
        if header.get("scores") != scores:
            raise cf.Failure(f"{path}: scores \"{header.get('scores')}\", want \"{scores}\"")
        for line in f:
            r = json.loads(line)
            if "ran" in r:
                ran, w = r["ran"], r.get("ran_weights")
                if len(ran) != k or len(set(ran)) != k or w is None or len(w) != k:
                    raise cf.Failure(f"{path}: tok {r['tok']} layer {r['layer']}: ran {ran}, "
                                     f"ran_weights {w}: want {k} distinct experts, k weights")
                if set(ran) == set(r["experts"]):
                    raise cf.Failure(f"{path}: tok {r['tok']} layer {r['layer']}: \"ran\" "
                                     "without a substitution")
            records[(r["tok"], r["layer"])] = r
    return records


def overrides(records, rescaled=True):
    """The reference's routing overrides: what ran at each substituted (token, layer). With
    rescaled False, each substitute keeps the weight of the expert it replaced."""
    out = {}
    for key, r in records.items():
        if "ran" not in r:
            continue
        w = list(r["ran_weights"])
        if not rescaled:
            gone = [(r["scores"][e], wt) for e, wt in zip(r["experts"], r["weights"])
                    if e not in r["ran"]]
            gone.sort(reverse=True)
            for i, e in enumerate(r["ran"]):
                if e not in r["experts"]:
                    w[i] = gone.pop(0)[1]
        out[key] = (np.array(r["ran"]), np.array(w, dtype=np.float64))
    return out


def check_arch(moevm, workdir, arch, rng):
    model = cf.make_model(moevm, workdir, arch, "f32")
    path = os.path.join(workdir, f"{arch}-f32.gguf")
    prompt = rng.integers(3, model.cfg.n_vocab, size=PROMPT_LENGTH).tolist()
    logits_path = os.path.join(workdir, f"{arch}-route.bin")
    trace_path = os.path.join(workdir, f"{arch}-route.jsonl")
    os.environ["MOEVM_PAGE_SIZE"] = "64K"
    # An F32 KV cache, for check_forward's sharp bound (the route module does not see it).
    cf.run([moevm, "run", "-m", path, "--tokens", ",".join(map(str, prompt)), "-n",
            str(N_GEN), "--temp", "0", "--gpu-budget", "30%", "--route", ROUTE,
            "--kv-type", "f32", "--logits-out", logits_path, "--trace-out", trace_path])
    rec = cf.read_logits(logits_path, model.cfg.n_vocab)
    tokens, logits = rec["token"].tolist(), rec["logits"].astype(np.float64)
    records = read_trace(trace_path, model.cfg.n_expert_used,
                         "sigmoid" if model.cfg.sigmoid_gate else "softmax")
    n_moe = model.cfg.n_layer - model.cfg.n_dense   # the traces see the MoE layers only
    if len(records) != len(tokens) * n_moe:
        raise cf.Failure(f"{len(records)} trace records for {len(tokens)} positions x "
                         f"{n_moe} layers")
    subs = overrides(records)
    if not subs:
        raise cf.Failure("no (token, layer) was substituted: the check would prove nothing")
    err = cf.row_errors(logits, moe_ref.forward(model, tokens, routing=subs))
    line = (f"{arch:9s} f32 {len(subs):2d}/{len(records)} rows substituted: max rel err "
            f"{err.max():.2e} (tol {TOL:.0e})")
    problems = [] if err.max() <= TOL else [f"error {err.max():.2e} at row {int(err.argmax())}"]
    bugs = {"substitution ignored": moe_ref.forward(model, tokens),
            "weights not rescaled": moe_ref.forward(model, tokens,
                                                    routing=overrides(records, False))}
    for name, ref in bugs.items():
        e = float(cf.row_errors(logits, ref).max())
        line += f"; {name} {e:.2e}"
        if not e >= cf.SENSITIVITY_MARGIN * TOL:
            problems.append(f"a reference with the {name} differs by only {e:.2e}: the "
                            "comparison cannot catch that bug, or the engine has it")
    return line, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moevm", required=True, help="the moevm executable")
    ap.add_argument("--workdir", required=True, help="directory for models, logits, traces")
    args = ap.parse_args()
    moevm = os.path.abspath(args.moevm)
    os.makedirs(args.workdir, exist_ok=True)
    rng = np.random.default_rng(cf.PROMPT_SEED)
    failures = []
    for arch in ARCHS:
        try:
            line, problems = check_arch(moevm, args.workdir, arch, rng)
        except (cf.Failure, ValueError, KeyError) as e:
            line, problems = f"{arch}: {e}", [str(e)]
        print(("FAIL " if problems else "ok   ") + line)
        failures += [f"{arch}: {p}" for p in problems]
    if failures:
        print(f"check_route: {len(failures)} failure(s)")
        return 1
    print("check_route: the engine computes what the route module chose")
    return 0


if __name__ == "__main__":
    sys.exit(main())
