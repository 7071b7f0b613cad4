# Generates the inline-PTX wgmma wrappers, one specialization per tile width N. Each asm names
# every accumulator register explicitly (PTX has no register-array operand), hence generated.
#   python3 gen_wgmma_ops.py bf16 kernel_templates/moejit/hopper/wgmma_ops.cuh
#   python3 gen_wgmma_ops.py fp8  kernel_templates/moejit/hopper_fp8/wgmma_fp8_ops.cuh
#   python3 gen_wgmma_ops.py rs   kernel_templates/moejit/hopper_w4/wgmma_rs_ops.cuh
import sys

HEADERS = {
    "bf16": """// wgmma.mma_async m64nNk16 with fp32 accumulators, A and B both K-major in shared memory
// (descriptors from wgmma.cuh). One specialization per N the kernels use.
// scale_d == 0 makes the instruction overwrite the accumulators (D = A*B): the first
// k-step of a tile needs no zeroing pass.
// mma() takes the accumulators as C++ operands; mma_named() uses the PTX registers
// %acc0.. that WgmmaAccRegs declares (why: WgmmaAccRegs below).
#pragma once

namespace moejit::hopper {

template <int kN, bool kHalf>
struct WgmmaOp;

// The accumulators as named PTX registers %acc0..%acc<kRegs - 1> instead of C++ variables:
// NVVM never sees them, so the k-loop carries no 64-128 values through inline-asm operands.
// Measured (docs/perf.md, JIT latency): NVVM's time grows steeply with the number of float
// values a loop carries through asm operands (~100 ms of a 128x256 compile for 128 of them);
// the wgmma instructions ptxas gets are the same. declare() must run exactly once per kernel,
// in its entry block (PTX wants the declaration before the uses in the text); read() copies
// them into C++ values once the last wgmma_wait has returned.
template <int kRegs>
struct WgmmaAccRegs;
""",
    "fp8": """// wgmma.mma_async m64nNk32 e4m3 x e4m3 -> fp32, A and B K-major in shared memory with 128-byte
// swizzle (descriptors: hopper/wgmma.cuh; a 128-byte row holds 128 e4m3 elements).
// scale_d == 0 overwrites the accumulators (D = A*B): each 128-wide K block starts afresh,
// which is what the block-scale promotion needs.
#pragma once

namespace moejit::hopper {

template <int kN>
struct WgmmaFp8Op;
""",
    "rs": """// wgmma.mma_async m64nNk16 bf16 x bf16 -> fp32 with A in registers (4 x bf16x2 per thread, the
// m64k16 fragment: a0 = (row g, k 2c..2c+1), a1 = (g + 8, 2c..), a2 = (g, 2c + 8..), a3 = (g + 8, 2c + 8..),
// g = lane / 4 + 16 * warp, c = lane % 4) and B K-major in shared memory (descriptor).
// A's registers must stay unchanged until the wgmma that reads them has completed (wait_group).
#pragma once

namespace moejit::hopper {

template <int kN>
struct WgmmaRsOp;
""",
}
WIDTHS = {"bf16": [32, 64, 96, 128, 192, 256], "fp8": [64, 96, 128, 192, 256], "rs": [16, 24, 32, 48, 64, 128, 256]}


def accumulators(nreg):
    return ",\n          ".join(", ".join(f'"+f"(d[{i+j}])' for j in range(min(8, nreg - i))) for i in range(0, nreg, 8))


def op(kind, n, half=False):
    """One specialization: operands %0..%(nreg-1) are the accumulators, then the inputs."""
    nreg = n // 2
    regs = ", ".join(f"%{i}" for i in range(nreg))
    if kind == "rs":
        name, signature = f"WgmmaRsOp<{n}>", f"const unsigned (&a)[4], unsigned long long desc_b,\n                                             int scale_d"
        a = ", ".join(f"%{nreg + i}" for i in range(4))
        instr, operands, pred = f"m64n{n}k16.f32.bf16.bf16 {{{regs}}}, {{{a}}}, %{nreg+4}, p, 1, 1, 0", \
            '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)', nreg + 5
    else:
        name = f"WgmmaOp<{n}, {'true' if half else 'false'}>" if kind == "bf16" else f"WgmmaFp8Op<{n}>"
        signature = "unsigned long long desc_a,\n                                             unsigned long long desc_b, int scale_d"
        if kind == "bf16":
            types, tail = ("f16.f16" if half else "bf16.bf16"), "p, 1, 1, 0, 0"
            instr = f"m64n{n}k16.f32.{types} {{{regs}}}, %{nreg}, %{nreg+1}, {tail}"
        else:  # FP8 wgmma has no transpose immediates: both operands are K-major
            instr = f"m64n{n}k32.f32.e4m3.e4m3 {{{regs}}}, %{nreg}, %{nreg+1}, p, 1, 1"
        operands, pred = '"l"(desc_a), "l"(desc_b), "r"(scale_d)', nreg + 2
    mnemonic, rest = instr.split(" ", 1)
    # rs: the accumulators may be the first kRegs of a wider tile's (a short last tile of a group
    # multiplies only its first N tokens into the registers the wide wgmma would use for them).
    head = (f"template <int kD>\n  __device__ __forceinline__ static void mma(float (&d)[kD], {signature}) {{\n"
            f"    static_assert(kD >= kRegs, \"the accumulators, or a wider tile's first kRegs\");")\
        if kind == "rs" else f"__device__ __forceinline__ static void mma(float (&d)[{nreg}], {signature}) {{"
    return f"""template <>
struct {name} {{
  static constexpr int kRegs = {nreg};
  {head}
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{pred}, 0;\\n"
        "wgmma.mma_async.sync.aligned.{mnemonic} "
        "{rest};\\n}}\\n"
        : {accumulators(nreg)}
        : {operands});
  }}{named(kind, n, half, nreg)}
}};
"""


def named_list(nreg, fmt, sep=", ", per_line=8, indent="        "):
    """fmt applied to 0..nreg-1, as C string literal lines of per_line items."""
    items = [fmt.format(i=i) for i in range(nreg)]
    rows = [sep.join(items[i:i + per_line]) for i in range(0, nreg, per_line)]
    return ("\n" + indent).join(f'"{r}{sep if k + 1 < len(rows) and sep.strip() else ""}"' for k, r in enumerate(rows))


def named(kind, n, half, nreg):
    """bf16 only: the same wgmma on the named accumulator registers of WgmmaAccRegs."""
    if kind != "bf16":
        return ""
    types = "f16.f16" if half else "bf16.bf16"
    regs = named_list(nreg, "%%acc{i}")
    return f"""
  __device__ __forceinline__ static void mma_named(unsigned long long desc_a, unsigned long long desc_b, int scale_d) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %2, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{types} {{"
        {regs}
        "}}, %0, %1, p, 1, 1, 0, 0;\\n}}\\n" ::"l"(desc_a), "l"(desc_b), "r"(scale_d));
  }}"""


def acc_regs(nreg):
    zero = named_list(nreg, "mov.b32 %%acc{i}, %0;\\n", sep="", per_line=4)
    read = named_list(nreg, "mov.b32 %{i}, %%acc{i};\\n", sep="", per_line=4)
    write = named_list(nreg, "mov.b32 %%acc{i}, %{i};\\n", sep="", per_line=4)
    outs = ",\n          ".join(", ".join(f'"=f"(d[{i+j}])' for j in range(8)) for i in range(0, nreg, 8))
    ins = ",\n          ".join(", ".join(f'"f"(d[{i+j}])' for j in range(8)) for i in range(0, nreg, 8))
    return f"""template <>
struct WgmmaAccRegs<{nreg}> {{
  __device__ __forceinline__ static void declare() {{ asm volatile(".reg .f32 %%acc<%0>;" ::"n"({nreg})); }}
  __device__ __forceinline__ static void zero() {{
    asm volatile(
        {zero} ::"n"(0));
  }}
  __device__ __forceinline__ static void read(float (&d)[{nreg}]) {{
    asm volatile(
        {read}
        : {outs});
  }}
  __device__ __forceinline__ static void write(const float (&d)[{nreg}]) {{
    asm volatile(
        {write}
        :: {ins});
  }}
}};
"""


def main():
    kind, path = (sys.argv[1], sys.argv[2]) if len(sys.argv) == 3 else ("bf16", sys.argv[1])
    out = ["// Generated by kernel_templates/tools/gen_wgmma_ops.py; do not edit by hand.\n" + HEADERS[kind]]
    for n in WIDTHS[kind]:
        for half in ((False, True) if kind == "bf16" else (False,)):
            out.append(op(kind, n, half))
        if kind == "bf16":
            out.append(acc_regs(n // 2))
    out.append("}  // namespace moejit::hopper\n")
    open(path, "w").write("\n".join(out))


main()
