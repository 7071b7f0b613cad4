"""moejit against torch._grouped_mm in turns, in one process (bf16 suite; docs/perf.md v31).

peers.py times torch in its own process after bench_suite's; at 16384 tokens one kernel's time
moved by up to 12% from process to process with what ran in the seconds before (the 700 W cap),
torch's as much, so that a comparison across processes drew lots. Here every round runs torch's
launch and moejit's (through build/examples/libmoejit_bench_capi.so, ctypes) on the same operands,
each after its own 256 MB L2 clear, on torch's stream: both see the same clocks.

Reads routing.csv (bench_suite's), prints CSV:
  model,gemm,tokens,moejit_ms,torch_ms,torch_over_moejit,rel_diff,spec
(ms: medians over the rounds; torch_over_moejit: the median of the rounds' ratios), then a summary line.
Usage: python3 tests/gpu/torch_turns.py routing.csv [build/examples/libmoejit_bench_capi.so]
"""
import ctypes
import math
import sys

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
    lib.moejit_bench_grouped_gemm_bf16.restype = ctypes.c_int
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.moejit_bench_grouped_gemm_bf16.argtypes = [p, p, p, p, p, ctypes.POINTER(ctypes.c_int), i, i, i, p,
                                                   ctypes.c_char_p, i, ctypes.c_char_p, i]
    return lib


class Moejit:
    def __init__(self, lib):
        self.lib, self.err = lib, ctypes.create_string_buffer(1024)
        self.rt = lib.moejit_bench_runtime(self.err, len(self.err))
        if not self.rt:
            raise RuntimeError(self.err.value.decode())

    def launcher(self, a, w, c, offsets_dev, offsets_host, n, k):
        """A function that launches C = A x W^T per group on torch's current stream, and the spec."""
        groups = len(offsets_host) - 1
        host = (ctypes.c_int * len(offsets_host))(*offsets_host)
        spec = ctypes.create_string_buffer(512)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        args = [self.rt, a.data_ptr(), w.data_ptr(), c.data_ptr(), offsets_dev.data_ptr(), host, groups, n, k, stream]

        def launch(spec_out=None):
            if self.lib.moejit_bench_grouped_gemm_bf16(*args, spec_out, 512 if spec_out else 0, self.err, len(self.err)):
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


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main(routing_path, capi_path):
    torch.manual_seed(0)
    moejit = Moejit(load_capi(capi_path))
    clear = torch.empty(L2_CLEAR_BYTES, dtype=torch.int8, device="cuda")
    bf16_weights = lambda E, n, k: torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    print("model,gemm,tokens,moejit_ms,torch_ms,torch_over_moejit,rel_diff,spec", flush=True)
    ratios = []
    for model, gemm, tokens, counts, n, k, w in routing_cases(routing_path, bf16_weights):
        rows = sum(counts)
        a = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        offsets_host = [0] + ends.tolist()
        offsets_dev = torch.tensor(offsets_host, device="cuda", dtype=torch.int32)
        wt = w.transpose(-2, -1)
        c_moejit = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        launch, spec = moejit.launcher(a, w, c_moejit, offsets_dev, offsets_host, n, k)
        # Both compute the same product (C poisoned with NaN first): ||moejit - torch|| / ||torch||, a
        # check of the operands' layouts, bf16 rounding apart.
        torch.cuda.synchronize()
        ref = torch._grouped_mm(a, wt, offs=ends, out_dtype=torch.bfloat16)
        diff = ((c_moejit.float() - ref.float()).norm() / ref.float().norm()).item() if rows else 0.0
        del ref
        run_torch = lambda: torch._grouped_mm(a, wt, offs=ends, out_dtype=torch.bfloat16)
        rounds = time_in_turns([launch, run_torch], clear)
        moejit_ms, torch_ms = median(r[0] for r in rounds), median(r[1] for r in rounds)
        # The ratio of each round's two times (same clocks), then its median: steadier than the
        # ratio of the medians where the clock moves within the run.
        ratio = median(r[1] / r[0] for r in rounds)
        print(f"{model},{gemm},{tokens},{moejit_ms:.4f},{torch_ms:.4f},{ratio:.3f},{diff:.3g},\"{spec}\"", flush=True)
        ratios.append((ratio, f"{model} {gemm} {tokens}", diff))
        del a, c_moejit
    if ratios:
        slowest = sorted(ratios)[:3]
        bad = [r for r in ratios if not (r[2] < 1e-2)]  # NaN fails too
        print(f"# in turns: moejit faster than torch._grouped_mm on {sum(r[0] > 1 for r in ratios)} of {len(ratios)}; "
              f"geomean torch/moejit {math.exp(sum(math.log(r[0]) for r in ratios) / len(ratios)):.3f}; lowest: "
              + ", ".join(f"{name} {ratio:.3f}" for ratio, name, _ in slowest)
              + f"; results differing from torch's by >= 1e-2: {len(bad)}", flush=True)


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    main(sys.argv[1] if len(sys.argv) > 1 else "routing.csv",
         sys.argv[2] if len(sys.argv) > 2 else "build/examples/libmoejit_bench_capi.so")
