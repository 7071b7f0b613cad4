"""Two kernel-template folders in turns, in one process (a template-only change, A/B).

run_build_ab.sh compares two template folders in alternating bench_suite processes; on an H200 at
16384 tokens one process's time moved by up to 17% from the next (2026-11-28, the 700 W cap), so
that a 3-5% change drew lots. Here both sides run in one process on the same operands, each launch
after its own 256 MB L2 clear, the order flipping every round (torch_turns.time_in_turns): both see
the same clocks.

Two copies of libmoejit_bench_capi.so are loaded (ctypes loads them RTLD_LOCAL, so each keeps its
own process-wide template store): the base copy reads the templates it was built with (or
BASE_TEMPLATES), the new copy reads NEW_TEMPLATES, set in the environment around its first compile
only. Both outputs are poisoned with NaN first and compared with each other.

Per side, BASE_CAPI_SPECS / NEW_CAPI_SPECS (optional) set BENCH_CAPI_SPECS around that side's launches
alone (spec-field overrides, examples/bench_capi.cpp), and NEW_CAPI (optional) names another build of
the library for the new side: a config or a heuristic change in turns against the base's choices.

Reads routing.csv (bench_suite's), prints CSV:
  model,gemm,tokens,base_ms,new_ms,new_over_base,rel_diff,spec[,new side's spec where it differs]
(new_over_base: the median of the rounds' ratios), then a summary line.
Usage: NEW_TEMPLATES=dir python3 tests/gpu/templates_turns.py routing.csv libmoejit_bench_capi.so [bf16|e4m3|mxfp4|nvfp4]
(mxfp4 / nvfp4: weight-only 4-bit B, random valid codes and scales in the pre-arranged layout, w4_weights.)
"""
import math
import os
import shutil
import sys
import tempfile
from statistics import median_high as median

import torch

from peers import routing_cases
from torch_turns import L2_CLEAR_BYTES, Moejit, bf16_case, bf16_weights, fp8_case, fp8_weights, load_capi, time_in_turns


def runtime_with_templates(capi_path, templates, tag):
    """A Moejit on its own copy of the library whose template store reads `templates` (None: the
    embedded ones). The store is process-wide and fixed when the copy's first Runtime is built, so
    MOEJIT_TEMPLATE_DIR is set around that alone."""
    copy = os.path.join(tempfile.mkdtemp(), f"libmoejit_bench_capi_{tag}.so")
    shutil.copy(capi_path, copy)
    saved = os.environ.pop("MOEJIT_TEMPLATE_DIR", None)
    if templates:
        os.environ["MOEJIT_TEMPLATE_DIR"] = templates
    try:
        return Moejit(load_capi(copy))
    finally:
        os.environ.pop("MOEJIT_TEMPLATE_DIR", None)
        if saved is not None:
            os.environ["MOEJIT_TEMPLATE_DIR"] = saved


def with_capi_specs(launch, overrides):
    """launch, run with BENCH_CAPI_SPECS=overrides (None: unset); the library reads it per launch."""
    def run(*args):
        saved = os.environ.pop("BENCH_CAPI_SPECS", None)
        if overrides:
            os.environ["BENCH_CAPI_SPECS"] = overrides
        try:
            return launch(*args)
        finally:
            os.environ.pop("BENCH_CAPI_SPECS", None)
            if saved is not None:
                os.environ["BENCH_CAPI_SPECS"] = saved
    return run


def w4_weights(fmt):
    """make_weights for weight-only 4-bit B: bytes in pack_w4_sm90's layout (include/moejit/formats.hpp,
    "W4 SM90"), drawn as bench_suite's w4_pattern draws them: per 128-row run a header (MXFP4: row
    exponents, 0 here), then ceil(K/64) blocks of 4096 code bytes (below 0x80) and scale bytes (MXFP4
    stored 118..127, NVFP4 re-encoded 0x30..0x47). NVFP4's per-expert tensor scales are 1."""
    nvfp4 = fmt == "nvfp4"
    header, block = (0, 4096 + 512) if nvfp4 else (128, 4096 + 256)

    def make(E, n, k):
        runs, kb = E * ((n + 127) // 128), (k + 63) // 64
        w = torch.empty(runs, header + kb * block, device="cuda", dtype=torch.uint8)
        w[:, :header] = 0
        blocks = w[:, header:].view(runs, kb, block)
        blocks[:, :, :4096] = torch.randint(0, 0x80, (runs, kb, 4096), device="cuda", dtype=torch.uint8)
        lo, count = (0x30, 24) if nvfp4 else (118, 10)
        blocks[:, :, 4096:] = torch.randint(lo, lo + count, (runs, kb, block - 4096), device="cuda", dtype=torch.uint8)
        return w, (torch.ones(E, device="cuda") if nvfp4 else None)
    return make


def w4_case(fmt):
    def case(counts, n, k, weights):
        w, tensor_scales = weights
        a = torch.randn(sum(counts), k, device="cuda", dtype=torch.bfloat16)
        ends = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
        return a, w, (fmt, tensor_scales), ends, None
    return case


def main(routing_path, capi_path, fmt):
    new_templates = os.environ.get("NEW_TEMPLATES")
    if not new_templates and not os.environ.get("NEW_CAPI"):
        raise SystemExit("NEW_TEMPLATES: the kernel_templates folder to compare (or NEW_CAPI: another build)")
    base_templates = os.environ.get("BASE_TEMPLATES")
    torch.manual_seed(0)
    sides = [runtime_with_templates(capi_path, base_templates, "base"),
             runtime_with_templates(os.environ.get("NEW_CAPI") or capi_path, new_templates, "new")]
    side_specs = [os.environ.get("BASE_CAPI_SPECS"), os.environ.get("NEW_CAPI_SPECS")]
    per_side = any(side_specs)
    clear = torch.empty(L2_CLEAR_BYTES, dtype=torch.int8, device="cuda")
    make_weights, make_case = {"bf16": (bf16_weights, bf16_case), "e4m3": (fp8_weights, fp8_case),
                               "mxfp4": (w4_weights("mxfp4"), w4_case("mxfp4")),
                               "nvfp4": (w4_weights("nvfp4"), w4_case("nvfp4"))}[fmt]
    print("model,gemm,tokens,base_ms,new_ms,new_over_base,rel_diff,spec", flush=True)
    ratios = []
    for model, gemm, tokens, counts, n, k, weights in routing_cases(routing_path, make_weights):
        rows = sum(counts)
        a, w, scales, ends, _ = make_case(counts, n, k, weights)
        offsets_host = [0] + ends.tolist()
        offsets_dev = torch.tensor(offsets_host, device="cuda", dtype=torch.int32)
        outs, launches, specs = [], [], []
        for moejit, overrides in zip(sides, side_specs):
            c = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            launcher = with_capi_specs(moejit.launcher, overrides) if per_side else moejit.launcher
            launch, spec = launcher(a, w, c, offsets_dev, offsets_host, n, k, scales)
            launch = with_capi_specs(launch, overrides) if per_side else launch
            outs.append(c), launches.append(launch), specs.append(spec)
        torch.cuda.synchronize()
        ref = outs[0].float()
        diff = ((outs[1].float() - ref).norm() / ref.norm()).item() if rows else 0.0
        if specs[0] != specs[1]:
            print(f"# {model} {gemm} {tokens}: the sides chose different specs", file=sys.stderr)
        rounds = time_in_turns(launches, clear)
        base_ms, new_ms = median(r[0] for r in rounds), median(r[1] for r in rounds)
        ratio = median(r[1] / r[0] for r in rounds)
        shown = f"{specs[0]}\",\"{specs[1]}" if specs[0] != specs[1] else specs[0]
        print(f"{model},{gemm},{tokens},{base_ms:.4f},{new_ms:.4f},{ratio:.3f},{diff:.3g},\"{shown}\"", flush=True)
        ratios.append((ratio, f"{model} {gemm} {tokens}", diff))
        del a, outs, ref
    if ratios:
        bad = [r for r in ratios if not (r[2] < 1e-3)]  # NaN fails too
        print(f"# {fmt} templates in turns: new faster on {sum(r[0] < 1 for r in ratios)} of {len(ratios)}; "
              f"geomean new/base {math.exp(sum(math.log(r[0]) for r in ratios) / len(ratios)):.3f}; "
              f"range {min(ratios)[0]:.3f}-{max(ratios)[0]:.3f}; outputs differing by >= 1e-3: {len(bad)}", flush=True)


if __name__ == "__main__":
    print(torch.__version__, torch.cuda.get_device_name(), file=sys.stderr)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "build/examples/libmoejit_bench_capi.so",
         sys.argv[3] if len(sys.argv) > 3 else "bf16")
