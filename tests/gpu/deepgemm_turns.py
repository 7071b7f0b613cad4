"""moejit against DeepGEMM in turns, in one process, on the same operands (the suite's cases).

deepgemm_peer.py times DeepGEMM in its own process after bench_suite's, on operands of its own. At
the 700 W cap a kernel's time moves by up to ~10% from process to process with what ran before it
(docs/perf.md v31), and at the cap the operands' bits move it too (v32). Here each round runs
moejit's launch (build/examples/libmoejit_bench_capi.so, ctypes, as torch_turns.py) and DeepGEMM's
on the same numbers, each after its own 256 MB L2 clear, on torch's stream: both see the same clocks.

  bf16: A (rows x K) and W (E x N x K) shared; DeepGEMM's contiguous layout gets A's rows copied
        into its padded layout (each group padded to 128 rows, as an engine would hand it over).
  e4m3: A, W and their fp32 scales (1x128 for A, 128x128 for W: the DeepSeek-V3 recipe both take)
        shared the same way; DeepGEMM takes A's scales in its MN-major TMA-aligned layout, built
        outside the timing.
  At 16 / 128 tokens DeepGEMM's masked layout (E x max_m rows) is timed in the same rounds, and a
  round's DeepGEMM time is the faster of its two layouts, as deepgemm_report.py takes them.

Prints CSV: model,gemm,tokens,moejit_ms,dg_ms,dg_over_moejit,rel_diff,spec (ms: medians over the
rounds; dg_over_moejit: the median of the rounds' ratios; rel_diff: ||moejit - DeepGEMM|| /
||DeepGEMM|| over the routed rows, moejit's C poisoned with NaN first), then a summary line.
DeepGEMM is staged as deepgemm_peer.py says (DG_ROOT). CASES="model:gemm:tokens,..." picks cases.
Usage: python3 tests/gpu/deepgemm_turns.py routing.csv [libmoejit_bench_capi.so] [bf16|e4m3]
"""
import os
import sys
from statistics import median_high as median

import torch

from deepgemm_peer import groups_of, load_deepgemm, random_e4m3
from peers import routing_cases
from torch_turns import L2_CLEAR_BYTES, Moejit, load_capi, print_summary, time_in_turns


def padded_copy(x, counts, starts, padded_rows):
    """x's rows (groups back to back) in DeepGEMM's padded contiguous layout."""
    out = torch.zeros((max(padded_rows, 1),) + tuple(x.shape[1:]), device=x.device, dtype=x.dtype)
    row = 0
    for s, c in zip(starts, counts):
        out[s:s + c] = x[row:row + c]
        row += c
    return out


def masked_copy(x, counts, max_m):
    """x's rows as DeepGEMM's masked layout: E x max_m rows, group g's first counts[g] rows."""
    out = torch.zeros((len(counts), max_m) + tuple(x.shape[1:]), device=x.device, dtype=x.dtype)
    row = 0
    for g, c in enumerate(counts):
        out[g, :c] = x[row:row + c]
        row += c
    return out


def bf16_weights(E, n, k):
    return torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05


def fp8_weights(E, n, k):
    b8 = random_e4m3((E, n, k))
    sfb = torch.rand(E, (n + 127) // 128, (k + 127) // 128, device="cuda") + 0.5
    return b8, sfb


def dg_calls(dg, fmt, counts, n, a, a_scales, weights, decode):
    """DeepGEMM's contiguous call (and, decode, its masked one) on A's rows, and a function that
    reads the contiguous call's output back in moejit's row order."""
    align = dg.get_mk_alignment_for_contiguous_layout()
    starts, m, m_indices = groups_of(counts, align)
    a_pad = padded_copy(a, counts, starts, m)
    d = torch.empty(max(m, 1), n, device="cuda", dtype=torch.bfloat16)
    if fmt == "bf16":
        contiguous = lambda: dg.m_grouped_bf16_gemm_nt_contiguous(a_pad, weights, d, m_indices)
    else:
        sfa = dg.get_mn_major_tma_aligned_tensor(padded_copy(a_scales, counts, starts, m))
        contiguous = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a_pad, sfa), weights, d, m_indices,
                                                                 compiled_dims="nk")
    rows_of = lambda: torch.cat([d[s:s + c] for s, c in zip(starts, counts)])
    calls = [contiguous]
    if decode:
        max_m = max(64, (max(counts) + 63) // 64 * 64)
        expected = max(1, (sum(counts) + len(counts) - 1) // len(counts))
        a_m = masked_copy(a, counts, max_m)
        d_m = torch.empty(len(counts), max_m, n, device="cuda", dtype=torch.bfloat16)
        masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
        if fmt == "bf16":
            calls.append(lambda: dg.m_grouped_bf16_gemm_nt_masked(a_m, weights, d_m, masked_m, expected))
        else:
            sfa_m = dg.get_mn_major_tma_aligned_tensor(masked_copy(a_scales, counts, max_m))
            calls.append(lambda: dg.m_grouped_fp8_gemm_nt_masked((a_m, sfa_m), weights, d_m, masked_m, expected))
    return calls, rows_of


def main(routing_path, capi_path, fmt):
    if fmt not in ("bf16", "e4m3"):
        raise SystemExit(f"format {fmt}: bf16 or e4m3")
    torch.manual_seed(0)
    dg = load_deepgemm()
    moejit = Moejit(load_capi(capi_path))
    clear = torch.empty(L2_CLEAR_BYTES, dtype=torch.int8, device="cuda")
    wanted = {tuple(c.split(":")) for c in os.environ.get("CASES", "").split(",") if c}
    print("model,gemm,tokens,moejit_ms,dg_ms,dg_over_moejit,rel_diff,spec", flush=True)
    ratios = []
    make_weights = bf16_weights if fmt == "bf16" else fp8_weights
    for model, gemm, tokens, counts, n, k, weights in routing_cases(routing_path, make_weights):
        if wanted and (model, gemm, str(tokens)) not in wanted:
            continue
        rows = sum(counts)
        kb = (k + 127) // 128
        if fmt == "bf16":
            a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
            a_scales, w, scales = None, weights, None
        else:
            a = random_e4m3((rows, k))
            a_scales = torch.rand(rows, kb, device="cuda") + 0.5
            w = weights[0]
            scales = (a_scales.t().contiguous(), weights[1])  # moejit: A's scales [K/128][rows]
        offsets_host = [0] + torch.tensor(counts).cumsum(0).tolist()
        offsets_dev = torch.tensor(offsets_host, device="cuda", dtype=torch.int32)
        c = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch, spec = moejit.launcher(a, w, c, offsets_dev, offsets_host, n, k, scales)
        try:
            calls, dg_rows = dg_calls(dg, fmt, counts, n, a, a_scales, weights, tokens <= 128)
            calls[0]()
        except Exception as e:  # noqa: BLE001 - report the case and go on
            print(f"{model},{gemm},{tokens},deepgemm failed: {repr(e)[:300]}", file=sys.stderr, flush=True)
            continue
        torch.cuda.synchronize()
        ref = dg_rows().float()
        diff = ((c.float() - ref).norm() / ref.norm()).item() if rows else 0.0
        del ref
        rounds = time_in_turns([launch] + calls, clear)
        ours = [r[0] for r in rounds]
        theirs = [min(r[1:]) for r in rounds]
        ratio = median(t / o for o, t in zip(ours, theirs))
        print(f"{model},{gemm},{tokens},{median(ours):.4f},{median(theirs):.4f},{ratio:.3f},{diff:.3g},\"{spec}\"",
              flush=True)
        ratios.append((ratio, f"{model} {gemm} {tokens}", diff))
        del a, c, calls
        torch.cuda.empty_cache()
    print_summary(fmt, "DeepGEMM", "DeepGEMM", ratios, 5)

if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    main(sys.argv[1] if len(sys.argv) > 1 else "routing.csv",
         sys.argv[2] if len(sys.argv) > 2 else "build/examples/libmoejit_bench_capi.so",
         sys.argv[3] if len(sys.argv) > 3 else "bf16")
