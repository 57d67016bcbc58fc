#!/usr/bin/env python3
"""The interposer under PyTorch, on a real GPU (issue 5's GPU check; run by
bench/gpu/interpose.sh, which sets LD_PRELOAD per mode).

A Mixtral-style MoE decoder with random weights (transformers' MixtralForCausalLM when
transformers is installed, else the same architecture written here in plain PyTorch), larger
than the GPU budget the interposer gets, decodes greedily from a fixed prompt. Modes:

  model --out F.npz             run the model; save the generated ids and the last logits
  offload --budget-mib N --out  the usual alternative under the same GPU memory cap: with
                                accelerate installed, its infer_auto_device_map(max_memory)
                                + dispatch_model (modules that do not fit run from CPU
                                memory, copied in by hooks at each forward); without it (or
                                with --by-hand), the same by hand: everything but the experts
                                on the GPU, then experts in order while the cap allows, the
                                rest in pinned host memory copied in right before use
  launches                      a launch-heavy loop that fits on the GPU (tiny kernels), timed
  compare A.npz B.npz           exit 0 when the two runs generated the same ids and logits

Prints one JSON line per run: tokens/s and what it ran.

--device cpu is a dry run for a machine without a GPU: the same models, hooks and placement
decisions, with every tensor left on the CPU (Accelerate's device map is computed and
reported but not dispatched). It checks the script against the installed transformers and
accelerate before a GPU lease is spent on it.
"""
import argparse
import json
import sys
import time

import numpy as np


def build_model(args):
    """Built on the CPU from the seed, so every mode and every process gets the same weights."""
    import torch
    torch.manual_seed(args.seed)
    try:
        from transformers import MixtralConfig, MixtralForCausalLM
        cfg = MixtralConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                            intermediate_size=args.ffn, num_hidden_layers=args.layers,
                            num_attention_heads=16, num_key_value_heads=4,
                            num_local_experts=args.experts, num_experts_per_tok=2,
                            max_position_embeddings=4096, use_cache=False)
        model = MixtralForCausalLM(cfg).to(args.dtype)
        kind = "transformers.MixtralForCausalLM"
        if args.experts_impl != "default":
            # transformers >= 5 keeps a layer's experts in 3-D tensors; "eager" hands each
            # expert's GEMM a view (base + e * stride), "grouped_mm" (its default where it
            # can) one kernel over the whole tensor.
            if not hasattr(model, "set_experts_implementation"):
                raise SystemExit("--experts-impl needs transformers >= 5")
            model.set_experts_implementation(args.experts_impl)
            kind += " (experts: %s)" % args.experts_impl
    except ImportError:
        model = TinyMixtral(args).to(args.dtype)
        kind = "plain-pytorch Mixtral (transformers not installed)"
    model.eval()
    return model, kind


def TinyMixtral(args):
    """Mixtral's block structure (RMSNorm, attention, top-2 of E SwiGLU experts, renormalised
    weights) in plain PyTorch, for machines without transformers."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Expert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(args.hidden, args.ffn, bias=False)
            self.w3 = nn.Linear(args.hidden, args.ffn, bias=False)
            self.w2 = nn.Linear(args.ffn, args.hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = nn.RMSNorm(args.hidden)
            self.attn = nn.MultiheadAttention(args.hidden, 16, bias=False, batch_first=True)
            self.n2 = nn.RMSNorm(args.hidden)
            self.gate = nn.Linear(args.hidden, args.experts, bias=False)
            self.experts = nn.ModuleList(Expert() for _ in range(args.experts))

        def forward(self, x):
            h = self.n1(x)
            t = x.shape[1]
            mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            h = self.n2(x).reshape(-1, args.hidden)
            p = F.softmax(self.gate(h).float(), dim=-1)
            w, sel = torch.topk(p, 2, dim=-1)
            w = (w / w.sum(-1, keepdim=True)).to(h.dtype)
            out = torch.zeros_like(h)
            for e in range(args.experts):
                rows, slot = torch.where(sel == e)
                if rows.numel():
                    out[rows] += w[rows, slot, None] * self.experts[e](h[rows])
            return x + out.reshape(x.shape)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.hidden)
            self.layers = nn.ModuleList(Block() for _ in range(args.layers))
            self.norm = nn.RMSNorm(args.hidden)
            self.head = nn.Linear(args.hidden, args.vocab, bias=False)

        def forward(self, ids):
            x = self.embed(ids)
            for b in self.layers:
                x = b(x)
            return self.head(self.norm(x)).float()

    return Model()


def logits_of(model, ids):
    out = model(ids)
    return out.logits if hasattr(out, "logits") else out


def sync(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize()


def generate(model, args, device):
    """Greedy decoding without a KV cache (the same work in every mode), timed."""
    import torch
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(0, args.vocab, (1, args.prompt), generator=g).to(device)
    with torch.no_grad():
        logits_of(model, ids)  # warm-up: first-touch paging, cuBLAS handles
        sync(device)
        t0 = time.perf_counter()
        for _ in range(args.tokens):
            logits = logits_of(model, ids)[:, -1, :]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
        sync(device)
        dt = time.perf_counter() - t0
    return ids.cpu().numpy(), logits.float().cpu().numpy(), args.tokens / dt


def expert_params(model):
    """The units of expert weights: each expert of a ModuleList, or a layer's whole fused
    experts module (newer transformers keep all of a layer's experts in 3-D tensors)."""
    import torch.nn as nn
    for name, mod in model.named_modules():
        if name.endswith("experts"):
            yield from (mod if isinstance(mod, nn.ModuleList) else [mod])


def dispatch_with_accelerate(model, device, budget_bytes):
    """Accelerate's own placement under the cap; None when accelerate is not installed."""
    try:
        from accelerate import dispatch_model, infer_auto_device_map
    except ImportError:
        return None
    no_split = [type(b).__name__ for b in getattr(model, "model", model).layers[:1]]
    device_map = infer_auto_device_map(model, max_memory={0: budget_bytes, "cpu": 1 << 40},
                                       no_split_module_classes=no_split)
    on_cpu = sum(1 for d in device_map.values() if d == "cpu")
    if on_cpu == 0:
        raise SystemExit("offload: the whole model fits in %d MiB; lower --budget-mib"
                         % (budget_bytes >> 20))
    if device.type != "cuda":
        return "accelerate device map (dry run, not dispatched): %d of %d modules on the CPU" \
            % (on_cpu, len(device_map))
    dispatch_model(model, device_map=device_map)
    return "accelerate dispatch_model: %d of %d modules on the CPU" % (on_cpu, len(device_map))


def offload_by_hand(model, device, budget_bytes):
    """Everything but the experts on the GPU; experts too while the cap allows; the rest in
    pinned host memory, copied in by a forward pre-hook and dropped after."""
    experts = list(expert_params(model))
    ids = {id(p) for ex in experts for p in ex.parameters()}
    for p in model.parameters():
        if id(p) not in ids:
            p.data = p.data.to(device)
    for b in model.buffers():
        b.data = b.data.to(device)
    room = budget_bytes - model_bytes(model, lambda p: id(p) not in ids)
    offloaded = 0
    for ex in experts:
        size = sum(p.numel() * p.element_size() for p in ex.parameters())
        if size <= room:
            ex.to(device)
            room -= size
        else:
            hook_offload(ex, device)
            offloaded += 1
    return "by hand, %d of %d expert modules on the CPU" % (offloaded, len(experts))


def hook_offload(ex, device):
    """ex's weights in pinned host memory, copied in before each forward, dropped after."""
    pin = device.type == "cuda"
    host = {n: (p.detach().to("cpu").pin_memory() if pin else p.detach().to("cpu"))
            for n, p in ex.named_parameters()}

    def pre(mod, _inp):
        for n, p in mod.named_parameters():
            p.data = host[n].to(device, non_blocking=True)

    def post(mod, _inp, _out):
        for n, p in mod.named_parameters():
            p.data = host[n]

    for n, p in ex.named_parameters():
        p.data = host[n]
    ex.register_forward_pre_hook(pre)
    ex.register_forward_hook(post)


def model_bytes(model, keep=lambda p: True):
    return sum(p.numel() * p.element_size() for p in model.parameters() if keep(p))


def cmd_model(args, offload=False):
    import torch
    device = torch.device(args.device)
    model, kind = build_model(args)
    total = model_bytes(model)
    placement = "all on the %s" % device.type
    if offload:
        budget = args.budget_mib << 20
        if budget >= total:
            raise SystemExit("offload: the model (%d MiB) fits in --budget-mib %d; nothing to "
                             "offload" % (total >> 20, args.budget_mib))
        placement = (not args.by_hand and dispatch_with_accelerate(model, device, budget)) \
            or offload_by_hand(model, device, budget)
    else:
        model.to(device)
    ids, logits, tps = generate(model, args, device)
    if args.out:
        np.savez(args.out, ids=ids, logits=logits)
    print(json.dumps({"mode": "offload" if offload else "model", "model": kind,
                      "placement": placement, "model_bytes": total, "tokens": args.tokens,
                      "tokens_per_s": tps,
                      "max_allocated": torch.cuda.max_memory_allocated()
                      if device.type == "cuda" else None}))


def cmd_launches(args):
    import torch
    device = torch.device(args.device)
    x = torch.ones(256, device=device)
    sync(device)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(args.launches):
            x.add_(1.0)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    out = {"mode": "launches", "launches": args.launches, "seconds": best,
           "us_per_launch": best / args.launches * 1e6}
    if args.out:
        json.dump(out, open(args.out, "w"))
    print(json.dumps(out))


def cmd_compare(a, b):
    x, y = np.load(a), np.load(b)
    same_ids = np.array_equal(x["ids"], y["ids"])
    diff = float(np.max(np.abs(x["logits"] - y["logits"])))
    scale = float(np.max(np.abs(x["logits"]))) or 1.0
    print(json.dumps({"same_ids": same_ids, "max_abs_logit_diff": diff,
                      "relative": diff / scale}))
    return 0 if same_ids and diff / scale < 1e-3 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["model", "offload", "launches", "compare"])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=3584)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--budget-mib", type=int, default=512,
                    help="offload: the GPU memory cap, as MOEVM_GPU_BUDGET for moevm")
    ap.add_argument("--by-hand", action="store_true",
                    help="offload: the hand-written expert offload even with accelerate")
    ap.add_argument("--experts-impl", default="default",
                    choices=["default", "eager", "grouped_mm"],
                    help="transformers' experts_implementation (default: its own choice)")
    ap.add_argument("--device", default="cuda",
                    help="cuda (default), or cpu for a dry run without a GPU")
    args = ap.parse_args()
    if args.mode == "compare":
        if len(args.files) != 2:
            ap.error("compare takes two .npz files")
        return cmd_compare(*args.files)
    if args.mode in ("model", "offload") and not args.out:
        ap.error("%s needs --out F.npz" % args.mode)
    import torch
    # fp16 as on the GPU; a dry run computes in fp32, which CPU kernels all support.
    args.dtype = torch.float16 if args.device == "cuda" else torch.float32
    if args.mode == "launches":
        return cmd_launches(args)
    cmd_model(args, offload=args.mode == "offload")
    return 0


if __name__ == "__main__":
    sys.exit(main())
