"""DeepGEMM as a peer, on the suite's routing (one run, beside bench_suite and the torch peers).

DeepGEMM (github.com/deepseek-ai/DeepGEMM) is not vendored: DG_ROOT names a checkout of it with
its two submodules' include folders (third-party/cutlass/include, third-party/fmt/include). Its
Python extension is built here with torch.utils.cpp_extension (ninja, the CUDA toolkit, DG_CXX
or g++) into DG_BUILD (default DG_ROOT/build); its kernels JIT-compile on first use with NVCC
(DG_JIT_USE_NVRTC=0: its NVRTC path does not find CUDA 13's headers), cached in DG_JIT_CACHE_DIR.

What is timed, per suite case (routing.csv from bench_suite: model,gemm,tokens,count_0..):
  fp8:  m_grouped_fp8_gemm_nt_contiguous, E4M3 A and B with 1x128 / 128x128 fp32 scales (the
        DeepSeek-V3 recipe, moejit's FP8 format). DeepGEMM's contiguous layout needs each group's
        rows padded to a multiple of get_mk_alignment_for_contiguous_layout() (128): A is built
        padded, as an engine would hand it over, and the padding rows are computed.
        At 16 / 128 tokens also m_grouped_fp8_gemm_nt_masked (max_m rows per group, the decode
        layout); the report takes the faster of the two.
  bf16: m_grouped_bf16_gemm_nt_contiguous, and masked at 16 / 128 tokens, the same way.
A scales are handed over in DeepGEMM's TMA-aligned MN-major layout (get_mn_major_tma_aligned_tensor,
outside the timing), so the timed call is the GEMM alone. Each result is checked on the largest
group against a float reference of the same operands (rel_err in the row).
Timing: tests/gpu/peers.py's median_ms (triton's do_bench, the L2 cleared before each launch), as
for bench_suite and the torch peers. FLOPs count the routed rows only (2 * sumM * N * K).

DG_COMPILED_DIMS (default "nk") is DeepGEMM's compiled_dims for the FP8 contiguous call: which of M,
N, K its JIT bakes into the kernel ("" leaves them to run time).
Prints CSV: peer,model,gemm,tokens,ms,rel_err. Usage: DG_ROOT=... python3 deepgemm_peer.py
routing.csv [fp8|bf16|both]
"""
import faulthandler
import os
import shutil
import sys

import torch

from peers import median_ms, routing_cases


def load_deepgemm():
    root = os.environ.get("DG_ROOT")
    if not root:
        sys.exit("DG_ROOT: a DeepGEMM checkout (see this file's docstring)")
    root = os.path.abspath(root)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    include = os.path.join(root, "deep_gemm", "include")
    for lib in ("cute", "cutlass"):  # the JIT includes them from the package's include folder
        if not os.path.isdir(os.path.join(include, lib)):
            shutil.copytree(os.path.join(root, "third-party", "cutlass", "include", lib), os.path.join(include, lib))
    from torch.utils.cpp_extension import load

    build = os.environ.get("DG_BUILD", os.path.join(root, "build"))
    # The extension must share torch's libstdc++ (dynamically linked): a compiler that links it in
    # statically (the device's CXX=/opt/gcc/bin/g++ did) gave the extension its own locale, and
    # DeepGEMM's first std::regex / stringstream crashed. DG_CXX (default: g++ on PATH) builds it.
    os.environ["CXX"] = os.environ.get("DG_CXX", shutil.which("g++") or "g++")
    os.environ.setdefault("DG_JIT_USE_NVRTC", "0")
    os.makedirs(build, exist_ok=True)
    ext = load(name="_C", sources=[os.path.join(root, "csrc", "python_api.cpp")],
               extra_include_paths=[f"{cuda}/include", f"{cuda}/include/cccl", include,
                                    os.path.join(root, "third-party", "cutlass", "include"),
                                    os.path.join(root, "third-party", "fmt", "include")],
               extra_cflags=["-std=c++17", "-O3", "-Wno-psabi", "-Wno-deprecated-declarations"],
               extra_ldflags=[f"-L{cuda}/lib64", "-lcudart", "-lnvrtc", "-lcuda"],
               build_directory=build, verbose=False)
    print("deepgemm_peer: extension built", file=sys.stderr, flush=True)
    sys.modules["deep_gemm._C"] = ext
    sys.path.insert(0, root)
    import deep_gemm

    print(f"deepgemm_peer: deep_gemm {deep_gemm.__version__} imported", file=sys.stderr, flush=True)
    return deep_gemm


def random_e4m3(shape):
    # Finite E4M3 codes of either sign, magnitudes below 32 (codes 0x60 and above left out).
    codes = torch.randint(0, 0x60, shape, device="cuda", dtype=torch.uint8)
    codes |= torch.randint(0, 2, shape, device="cuda", dtype=torch.uint8) << 7
    return codes.view(torch.float8_e4m3fn)


def rel_err(out, ref):
    return float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def groups_of(counts, align):
    """(first row of each group in the padded layout, padded total, m_indices)."""
    starts, row = [], 0
    for c in counts:
        starts.append(row)
        row += (c + align - 1) // align * align
    m_indices = torch.full((max(row, 1),), -1, dtype=torch.int32)
    for g, (s, c) in enumerate(zip(starts, counts)):
        m_indices[s:s + c] = g
    return starts, row, m_indices.cuda()


def fp8_case(dg, model, gemm, tokens, counts, n, k, b8, sfb):
    E = len(counts)
    kb = (k + 127) // 128
    align = dg.get_mk_alignment_for_contiguous_layout()
    starts, m, m_indices = groups_of(counts, align)
    a8 = random_e4m3((m, k))
    sfa = torch.rand(m, kb, device="cuda") + 0.5
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    sfa_t = dg.get_mn_major_tma_aligned_tensor(sfa)
    dims = os.environ.get("DG_COMPILED_DIMS", "nk")  # "": N and K at run time (an experiment's)
    fn = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((a8, sfa_t), (b8, sfb), d, m_indices, compiled_dims=dims)
    fn()
    g = max(range(E), key=lambda i: counts[i])
    rows = slice(starts[g], starts[g] + counts[g])
    a_deq = a8[rows].float() * sfa[rows].repeat_interleave(128, dim=1)[:, :k]
    b_deq = b8[g].float() * sfb[g].repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    err = rel_err(d[rows], a_deq @ b_deq.t())
    print(f"deepgemm_fp8_contiguous,{model},{gemm},{tokens},{median_ms(fn):.4f},{err:.1e}", flush=True)
    del a8, sfa, sfa_t, d
    if tokens <= 128:
        max_m = max(64, (max(counts) + 63) // 64 * 64)
        expected = max(1, (sum(counts) + E - 1) // E)
        a8 = random_e4m3((E, max_m, k))
        sfa = torch.rand(E, max_m, kb, device="cuda") + 0.5
        d = torch.empty(E, max_m, n, device="cuda", dtype=torch.bfloat16)
        masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
        sfa_t = dg.get_mn_major_tma_aligned_tensor(sfa)
        fn = lambda: dg.m_grouped_fp8_gemm_nt_masked((a8, sfa_t), (b8, sfb), d, masked_m, expected)
        fn()
        print(f"deepgemm_fp8_masked,{model},{gemm},{tokens},{median_ms(fn):.4f},", flush=True)


def bf16_case(dg, model, gemm, tokens, counts, n, k, w):
    E = len(counts)
    align = dg.get_mk_alignment_for_contiguous_layout()
    starts, m, m_indices = groups_of(counts, align)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fn = lambda: dg.m_grouped_bf16_gemm_nt_contiguous(a, w, d, m_indices)
    fn()
    g = max(range(E), key=lambda i: counts[i])
    rows = slice(starts[g], starts[g] + counts[g])
    err = rel_err(d[rows], a[rows].float() @ w[g].float().t())
    print(f"deepgemm_bf16_contiguous,{model},{gemm},{tokens},{median_ms(fn):.4f},{err:.1e}", flush=True)
    del a, d
    if tokens <= 128:
        max_m = max(64, (max(counts) + 63) // 64 * 64)
        expected = max(1, (sum(counts) + E - 1) // E)
        a = torch.randn(E, max_m, k, device="cuda", dtype=torch.bfloat16)
        d = torch.empty(E, max_m, n, device="cuda", dtype=torch.bfloat16)
        masked_m = torch.tensor(counts, dtype=torch.int32, device="cuda")
        fn = lambda: dg.m_grouped_bf16_gemm_nt_masked(a, w, d, masked_m, expected)
        fn()
        print(f"deepgemm_bf16_masked,{model},{gemm},{tokens},{median_ms(fn):.4f},", flush=True)


def main(routing_path, which):
    faulthandler.enable()
    torch.manual_seed(0)
    dg = load_deepgemm()

    def make_weights(E, n, k):
        b8 = random_e4m3((E, n, k)) if which in ("fp8", "both") else None
        sfb = torch.rand(E, (n + 127) // 128, (k + 127) // 128, device="cuda") + 0.5 if b8 is not None else None
        w = (torch.randn(E, n, k, device="cuda", dtype=torch.bfloat16) * 0.05) if which in ("bf16", "both") else None
        return b8, sfb, w

    for model, gemm, tokens, counts, n, k, (b8, sfb, w) in routing_cases(routing_path, make_weights):
        for kind, run in (("fp8", lambda: fp8_case(dg, model, gemm, tokens, counts, n, k, b8, sfb)),
                          ("bf16", lambda: bf16_case(dg, model, gemm, tokens, counts, n, k, w))):
            if which not in (kind, "both"):
                continue
            print(f"deepgemm_peer: {kind} {model} {gemm} {tokens}", file=sys.stderr, flush=True)
            try:
                run()
            except Exception as e:  # noqa: BLE001 - report the case and go on
                print(f"{model},{gemm},{tokens},deepgemm {kind} failed: {repr(e)[:300]}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "both")
