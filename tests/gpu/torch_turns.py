"""moejit against torch in turns, in one process (the suite's cases; docs/perf.md v31).

peers.py times torch in its own process after bench_suite's; at 16384 tokens one kernel's time
moved by up to 12% from process to process with what ran in the seconds before (the 700 W cap),
torch's as much, so that a comparison across processes drew lots. Here every round runs torch's
launch and moejit's (through build/examples/libmoejit_bench_capi.so, ctypes) on the same operands,
each after its own 256 MB L2 clear, on torch's stream: both see the same clocks.

Formats: bf16 (torch._grouped_mm) and e4m3 (torch._scaled_grouped_mm with row-wise scales, as in
peers_formats.py, against moejit's DeepSeek-V3 block scales; the scales are drawn so that both
recipes describe the same numbers: A's constant along K, B's constant over each 128 output rows).

Reads routing.csv (bench_suite's), prints CSV:
  model,gemm,tokens,moejit_ms,torch_ms,torch_over_moejit,rel_diff,spec
(ms: medians over the rounds; torch_over_moejit: the median of the rounds' ratios; rel_diff:
||moejit - torch|| / ||torch||, moejit's C poisoned with NaN first), then a summary line.
Usage: python3 tests/gpu/torch_turns.py routing.csv [libmoejit_bench_capi.so] [bf16|e4m3]
"""
import ctypes
import math
import sys
from statistics import median_high as median  # sorted[n // 2], as bench_suite takes its medians

import torch

from peers import routing_cases

L2_CLEAR_BYTES = 256 << 20
WARMUP_MS, TIMED_MS = 25.0, 100.0  # per peer, as do_bench(warmup=25, rep=100)
# At least this many rounds: at 16384 tokens the clock the 700 W cap allows moves within a run, so
# that one kernel timed three times in turns gave medians 6% apart over 8 rounds (bench_suite, v31).
MIN_ROUNDS = 20


def load_capi(path):
    lib = ctypes.CDLL(path)
    lib.moejit_bench_runtime.restype = ctypes.c_void_p
    lib.moejit_bench_runtime.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.moejit_bench_runtime_free.argtypes = [ctypes.c_void_p]
    p, i, text = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    offsets_host = ctypes.POINTER(ctypes.c_int)
    lib.moejit_bench_grouped_gemm_bf16.restype = ctypes.c_int
    lib.moejit_bench_grouped_gemm_bf16.argtypes = [p, p, p, p, p, offsets_host, i, i, i, p, text, i, text, i]
    lib.moejit_bench_grouped_gemm_fp8.restype = ctypes.c_int
    lib.moejit_bench_grouped_gemm_fp8.argtypes = [p, p, p, p, p, p, p, offsets_host, i, i, i, p, text, i, text, i]
    lib.moejit_bench_grouped_gemm_w4.restype = ctypes.c_int
    lib.moejit_bench_grouped_gemm_w4.argtypes = [p, i, p, p, p, p, p, offsets_host, i, i, i, p, text, i, text, i]
    return lib


class Moejit:
    def __init__(self, lib):
        self.lib, self.err = lib, ctypes.create_string_buffer(1024)
        self.rt = lib.moejit_bench_runtime(self.err, len(self.err))
        if not self.rt:
            raise RuntimeError(self.err.value.decode())

    def launcher(self, a, w, c, offsets_dev, offsets_host, n, k, scales=None):
        """A function that launches C = A x W^T per group on torch's current stream, and the spec.
        scales: None (bf16), (a_scales, b_scales) of the FP8 block-scaled kernel, or ("mxfp4" | "nvfp4",
        tensor_scales or None) for weight-only 4-bit B (templates_turns.w4_weights)."""
        groups = len(offsets_host) - 1
        host = (ctypes.c_int * len(offsets_host))(*offsets_host)
        spec = ctypes.create_string_buffer(512)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        if scales is None:
            entry = self.lib.moejit_bench_grouped_gemm_bf16
            args = [self.rt, a.data_ptr(), w.data_ptr(), c.data_ptr()]
        elif isinstance(scales[0], str):
            entry = self.lib.moejit_bench_grouped_gemm_w4
            tensor_scales = scales[1].data_ptr() if scales[1] is not None else None
            args = [self.rt, int(scales[0] == "nvfp4"), a.data_ptr(), w.data_ptr(), c.data_ptr(), tensor_scales]
        else:
            entry = self.lib.moejit_bench_grouped_gemm_fp8
            args = [self.rt, a.data_ptr(), w.data_ptr(), c.data_ptr(), scales[0].data_ptr(), scales[1].data_ptr()]
        args += [offsets_dev.data_ptr(), host, groups, n, k, stream]

        def launch(spec_out=None):
            if entry(*args, spec_out, 512 if spec_out else 0, self.err, len(self.err)):
                raise RuntimeError(self.err.value.decode())

        launch(spec)
        return launch, spec.value.decode()


def time_in_turns(fns, clear):
    """Per round, each function's ms, over rounds in which every one runs once after its own L2
    clear (at least 20 rounds, ~100 ms per function)."""
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for f in fns:
        f()
    stop.record()
    torch.cuda.synchronize()
    round_ms = max(start.elapsed_time(stop), 1e-3)
    for _ in range(min(int(WARMUP_MS * len(fns) / round_ms) + 1, 10000)):
        for f in fns:
            f()
    rounds = max(MIN_ROUNDS, min(int(TIMED_MS * len(fns) / round_ms), 100))
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in fns]
              for _ in range(rounds)]
    for r in range(rounds):
        # The order flips every round, so that neither peer always follows the other.
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for j in order:
            clear.zero_()
            events[r][j][0].record()
            fns[j]()
            events[r][j][1].record()
    torch.cuda.synchronize()
    return [[b.elapsed_time(e) for b, e in events[r]] for r in range(rounds)]


def bf16_case(counts, n, k, w):
    """moejit's operands and scales (None), and a torch call on the same numbers."""
    rows = sum(counts)
    a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    wt = w.transpose(-2, -1)
    return a, w, None, ends, lambda: torch._grouped_mm(a, wt, offs=ends, out_dtype=torch.bfloat16)


def bf16_weights(E, n, k):
    return torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05


def fp8_case(counts, n, k, weights):
    """FP8: A and B e4m3; torch's row-wise scales (A per row, B per output channel) and moejit's
    blocks (A [ceil(k/128)][rows], B [E][ceil(n/128)][ceil(k/128)]) describe the same numbers: A's
    scale constant along K, B's constant over each 128 output rows."""
    w8, b_blocks, b_channels = weights
    rows = sum(counts)
    a8 = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
    sa = torch.rand(rows, device="cuda") + 0.5
    a_blocks = sa.expand((k + 127) // 128, rows).contiguous()
    ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
    w8t = w8.transpose(-2, -1)
    run = lambda: torch._scaled_grouped_mm(a8, w8t, sa, b_channels, offs=ends, out_dtype=torch.bfloat16)
    return a8, w8, (a_blocks, b_blocks), ends, run


def fp8_weights(E, n, k):
    w8 = (torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05).to(torch.float8_e4m3fn)
    per_block = torch.rand(E, (n + 127) // 128, device="cuda") + 0.5
    b_blocks = per_block[:, :, None].expand(E, (n + 127) // 128, (k + 127) // 128).contiguous()
    b_channels = per_block.repeat_interleave(128, dim=1)[:, :n].contiguous()
    return w8, b_blocks, b_channels


def main(routing_path, capi_path, fmt):
    torch.manual_seed(0)
    moejit = Moejit(load_capi(capi_path))
    clear = torch.empty(L2_CLEAR_BYTES, dtype=torch.int8, device="cuda")
    formats = {"bf16": (bf16_weights, bf16_case, "torch._grouped_mm"),
               "e4m3": (fp8_weights, fp8_case, "torch._scaled_grouped_mm")}
    if fmt not in formats:
        raise SystemExit(f"format {fmt}: bf16 or e4m3")
    make_weights, make_case, peer = formats[fmt]
    print("model,gemm,tokens,moejit_ms,torch_ms,torch_over_moejit,rel_diff,spec", flush=True)
    ratios = []
    for model, gemm, tokens, counts, n, k, weights in routing_cases(routing_path, make_weights):
        rows = sum(counts)
        a, w, scales, ends, run_torch = make_case(counts, n, k, weights)
        offsets_host = [0] + ends.tolist()
        offsets_dev = torch.tensor(offsets_host, device="cuda", dtype=torch.int32)
        c_moejit = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch, spec = moejit.launcher(a, w, c_moejit, offsets_dev, offsets_host, n, k, scales)
        torch.cuda.synchronize()
        ref = run_torch()
        diff = ((c_moejit.float() - ref.float()).norm() / ref.float().norm()).item() if rows else 0.0
        del ref
        rounds = time_in_turns([launch, run_torch], clear)
        moejit_ms, torch_ms = median(r[0] for r in rounds), median(r[1] for r in rounds)
        # The ratio of each round's two times (same clocks), then its median: steadier than the
        # ratio of the medians where the clock moves within the run.
        ratio = median(r[1] / r[0] for r in rounds)
        print(f"{model},{gemm},{tokens},{moejit_ms:.4f},{torch_ms:.4f},{ratio:.3f},{diff:.3g},\"{spec}\"", flush=True)
        ratios.append((ratio, f"{model} {gemm} {tokens}", diff))
        del a, c_moejit
    print_summary(fmt, peer, "torch", ratios, 3)


def print_summary(fmt, peer, short, ratios, lowest):
    """The closing line: ratios holds (peer time / moejit time, case name, rel_diff) per case."""
    if not ratios:
        return
    bad = [r for r in ratios if not (r[2] < 1e-2)]  # NaN fails too
    print(f"# {fmt} in turns: moejit faster than {peer} on {sum(r[0] > 1 for r in ratios)} of {len(ratios)}; "
          f"geomean {short}/moejit {math.exp(sum(math.log(r[0]) for r in ratios) / len(ratios)):.3f}; lowest: "
          + ", ".join(f"{name} {ratio:.3f}" for ratio, name, _ in sorted(ratios)[:lowest])
          + f"; results differing from {short}'s by >= 1e-2: {len(bad)}", flush=True)


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    main(sys.argv[1] if len(sys.argv) > 1 else "routing.csv",
         sys.argv[2] if len(sys.argv) > 2 else "build/examples/libmoejit_bench_capi.so",
         sys.argv[3] if len(sys.argv) > 3 else "bf16")
