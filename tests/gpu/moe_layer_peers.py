"""Baseline for the fused MoE layer (issue 5): one MoE layer composed of torch operations around
torch._grouped_mm, timed on the GPU machine. The fused moejit layer has to beat these numbers.

Layer, as the models define it (BF16 weights, FP32 routing math):
  route    router logits -> top-k experts and routing weights per token
             gpt-oss-120b, mixtral-8x7b: top-k of the logits, softmax over the k chosen
             qwen3-30b-a3b: softmax over all experts, top-k, renormalized
             deepseek-v3:   sigmoid scores; top-k of score + correction bias among the 4 of 8
                            expert groups with the best sum of their two best; weights = the chosen
                            scores renormalized, x2.5 (as examples/moe_layer and moejit::route do)
  permute  rows sorted by expert (stable), per-expert offsets, A gathered by token index
  GEMM1    [rows, H] x W1[e]^T -> [rows, 2I] (+ per-expert bias for gpt-oss), then the activation:
             gpt-oss: SwiGLU on interleaved gate/up, gate clamped at 7, linear part at +-7,
                      out = gate * sigmoid(1.702 gate) * (linear + 1)
             others:  SwiGLU on split halves, silu(gate) * up
  GEMM2    [rows, I] x W2[e]^T -> [rows, H] (+ bias for gpt-oss), times the routing weight,
           summed into the token's output row (index_add_)
Nothing here synchronizes with the host (counts by scatter_add_, not bincount), so the times are
what a CUDA-graph-free eager layer costs at best.

Prints CSV: model,tokens,what,ms   where what is layer | gemm1_alone | gemm2_alone | route_permute
Usage: python3 moe_layer_peers.py [TOKENS=16,1024,16384] [MODELS=...]
"""
import os
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

MODELS = {  # name: (experts, topk, hidden, intermediate, routing, interleaved_oai_swiglu, bias)
    "gpt-oss-120b": (128, 4, 2880, 2880, "topk_softmax", True, True),
    "deepseek-v3": (256, 8, 7168, 2048, "sigmoid_group_topk", False, False),
    "qwen3-30b-a3b": (128, 8, 2048, 768, "softmax_topk", False, False),
    "mixtral-8x7b": (8, 2, 4096, 14336, "topk_softmax", False, False),
}


def median_ms(fn):
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


def route(logits, topk, kind, correction_bias=None, groups=8, topk_groups=4, scaling=2.5):
    if kind == "topk_softmax":
        vals, idx = torch.topk(logits, topk, dim=-1)
        return idx, torch.softmax(vals, dim=-1)
    if kind == "sigmoid_group_topk":
        tokens, experts = logits.shape
        scores = torch.sigmoid(logits)
        choice = scores + correction_bias
        group_score = choice.view(tokens, groups, -1).topk(2, dim=-1)[0].sum(dim=-1)
        kept = torch.zeros_like(group_score).scatter_(1, group_score.topk(topk_groups, dim=-1)[1], 1.0)
        kept = kept.bool().unsqueeze(-1).expand(tokens, groups, experts // groups).reshape(tokens, experts)
        idx = choice.masked_fill(~kept, float("-inf")).topk(topk, dim=-1)[1]
        vals = scores.gather(1, idx)
        return idx, vals / (vals.sum(dim=-1, keepdim=True) + 1e-20) * scaling
    scores = torch.softmax(logits, dim=-1) if kind == "softmax_topk" else torch.sigmoid(logits)
    vals, idx = torch.topk(scores, topk, dim=-1)
    return idx, vals / vals.sum(dim=-1, keepdim=True)


def activation(h, oai):
    if oai:
        gate, lin = h[:, 0::2].float(), h[:, 1::2].float()
        gate = gate.clamp(max=7.0)
        lin = lin.clamp(-7.0, 7.0)
        return (gate * torch.sigmoid(1.702 * gate) * (lin + 1)).to(h.dtype)
    half = h.shape[1] // 2
    return (F.silu(h[:, :half].float()) * h[:, half:].float()).to(h.dtype)


def make_layer(E, topk, H, I, kind, oai, bias):
    dev = "cuda"
    w1 = torch.randn(E, 2 * I, H, device=dev, dtype=torch.bfloat16) * H**-0.5
    w2 = torch.randn(E, H, I, device=dev, dtype=torch.bfloat16) * I**-0.5
    b1 = torch.randn(E, 2 * I, device=dev, dtype=torch.bfloat16) * 0.1 if bias else None
    b2 = torch.randn(E, H, device=dev, dtype=torch.bfloat16) * 0.1 if bias else None
    corr = torch.randn(E, device=dev) * 0.05 if kind == "sigmoid_group_topk" else None
    w1t, w2t = w1.transpose(-2, -1), w2.transpose(-2, -1)  # [E, K, N] views of [E, N, K] storage

    def permute(x, logits):
        idx, weights = route(logits.float(), topk, kind, corr)
        flat_e = idx.flatten()
        order = torch.argsort(flat_e, stable=True)
        counts = torch.zeros(E, device=dev, dtype=torch.int32).scatter_add_(
            0, flat_e.int(), torch.ones_like(flat_e, dtype=torch.int32))
        offs = counts.cumsum(0, dtype=torch.int32)
        return order // topk, flat_e[order], weights.flatten()[order], offs

    def layer(x, logits):
        token_of_row, expert_of_row, weight_of_row, offs = permute(x, logits)
        h = torch._grouped_mm(x[token_of_row], w1t, offs=offs, out_dtype=torch.bfloat16)
        if bias:
            h += b1[expert_of_row]
        y = torch._grouped_mm(activation(h, oai), w2t, offs=offs, out_dtype=torch.bfloat16)
        if bias:
            y += b2[expert_of_row]
        y = y * weight_of_row[:, None].to(y.dtype)
        return torch.zeros_like(x).index_add_(0, token_of_row, y)

    def reference(x, logits):  # per token, FP32, straight from the definition
        idx, weights = route(logits.float(), topk, kind, corr)
        out = torch.zeros(x.shape, device=dev, dtype=torch.float32)
        for t in range(x.shape[0]):
            for j in range(topk):
                e = int(idx[t, j])
                h = x[t].float() @ w1[e].float().t()
                if bias:
                    h += b1[e].float()
                a = activation(h[None].to(torch.bfloat16), oai).float()[0]
                y = a @ w2[e].float().t()
                if bias:
                    y += b2[e].float()
                out[t] += weights[t, j] * y
        return out

    return layer, permute, reference, (w1t, w2t)


def main():
    tokens_list = [int(t) for t in os.environ.get("TOKENS", "16,1024,16384").split(",")]
    models = os.environ.get("MODELS", ",".join(MODELS)).split(",")
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    print("model,tokens,what,ms", flush=True)
    for name in models:
        E, topk, H, I, kind, oai, bias = MODELS[name]
        torch.manual_seed(0)
        layer, permute, reference, (w1t, w2t) = make_layer(E, topk, H, I, kind, oai, bias)
        # The composed layer is checked once against the per-token FP32 definition.
        x = torch.randn(8, H, device="cuda", dtype=torch.bfloat16)
        logits = torch.randn(8, E, device="cuda")
        ref = reference(x, logits)
        err = float((layer(x, logits).float() - ref).norm() / ref.norm())
        print(f"{name}: composed layer rel_err vs FP32 reference {err:.2e}", file=sys.stderr)
        assert err < 2e-2, err
        for tokens in tokens_list:
            x = torch.randn(tokens, H, device="cuda", dtype=torch.bfloat16)
            logits = torch.randn(tokens, E, device="cuda")
            print(f"{name},{tokens},layer,{median_ms(lambda: layer(x, logits)):.4f}", flush=True)
            print(f"{name},{tokens},route_permute,{median_ms(lambda: permute(x, logits)):.4f}", flush=True)
            token_of_row, _, _, offs = permute(x, logits)
            xs = x[token_of_row]
            h = torch._grouped_mm(xs, w1t, offs=offs, out_dtype=torch.bfloat16)
            a = h[:, : h.shape[1] // 2].contiguous()
            print(f"{name},{tokens},gemm1_alone,{median_ms(lambda: torch._grouped_mm(xs, w1t, offs=offs, out_dtype=torch.bfloat16)):.4f}", flush=True)
            print(f"{name},{tokens},gemm2_alone,{median_ms(lambda: torch._grouped_mm(a, w2t, offs=offs, out_dtype=torch.bfloat16)):.4f}", flush=True)
            del x, logits, xs, h, a
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
