"""moejit against DeepGEMM under sustained load, or one launch each for Nsight Compute, on the same
operands as deepgemm_turns.py (docs/perf.md v50: at the 700 W cap both draw the same power, and
DeepGEMM's FP8 kernel takes fewer cycles).

  power: per case (CASES="model:gemm:tokens,..."), moejit and DeepGEMM each launched back to back for
         SECONDS (default 4), twice, alternating; prints phase,<name>,<start s>,<end s>,<ms per launch>
         to cut an nvidia-smi log with (as tests/gpu/run_power.sh does: `nvidia-smi
         --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu --format=csv,noheader,nounits
         -lms 20` in the background, samples from one second into each phase).
  once:  one launch of each after the first (for `ncu -k regex:"moejit_grouped_gemm|sm90_fp8_gemm"`).
  timeline (e4m3): six launches of each, then the per-CTA stats that instrumented kernels leave past
         their outputs' ends, as TL,<case>,ours|dg,<cta>,<16 uint32> lines. Ours: MOEJIT_TEMPLATE_DIR with
         docs/experiments/2026-11-28-fp8-per-tile-timeline.patch applied; room past C's last row. DeepGEMM's
         sm90_fp8_gemm_1d2d.cuh edited the same way (by hand: not in this repo), its stats past the B
         scales (sfb), which are padded here. docs/experiments/2026-11-28-fp8-timeline-summary.py sums them.
DeepGEMM is staged as deepgemm_peer.py says (DG_ROOT).
Usage: python3 tests/gpu/deepgemm_power.py routing.csv CAPI e4m3|bf16 power|once|timeline [SECONDS]
"""
import os
import sys
import time

import torch

from deepgemm_peer import load_deepgemm, random_e4m3
from deepgemm_turns import bf16_weights, dg_calls, fp8_weights
from peers import routing_cases
from power_peers import phase
from torch_turns import Moejit, load_capi


def main(routing, capi, fmt, mode, seconds):
    torch.manual_seed(0)
    dg = load_deepgemm()
    moejit = Moejit(load_capi(capi))
    wanted = {tuple(c.split(":")) for c in os.environ.get("CASES", "").split(",") if c}
    make_weights = bf16_weights if fmt == "bf16" else fp8_weights
    for model, gemm, tokens, counts, n, k, weights in routing_cases(routing, make_weights):
        if (model, gemm, str(tokens)) not in wanted:
            continue
        rows = sum(counts)
        kb = (k + 127) // 128
        if fmt == "bf16":
            a, a_scales, w, scales = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16), None, weights, None
        else:
            a = random_e4m3((rows, k))
            a_scales = torch.rand(rows, kb, device="cuda") + 0.5
            if mode == "timeline":  # room past B's scales for DeepGEMM's instrumented kernel
                sfb = weights[1]
                sfb_room = torch.full((sfb.numel() + 16 * 1024,), -1.0, device="cuda")
                sfb_room[:sfb.numel()].copy_(sfb.flatten())
                weights = (weights[0], sfb_room[:sfb.numel()].view(sfb.shape))
            w, scales = weights[0], (a_scales.t().contiguous(), weights[1])
        offsets_host = [0] + torch.tensor(counts).cumsum(0).tolist()
        offsets_dev = torch.tensor(offsets_host, device="cuda", dtype=torch.int32)
        # timeline: room past C's last row for 132+ CTAs' 64-byte stats
        c_room = torch.zeros((rows + (16 * 1024 * 4) // (2 * n) + 1, n), device="cuda", dtype=torch.bfloat16)
        c = c_room[:rows]
        launch, spec = moejit.launcher(a, w, c, offsets_dev, offsets_host, n, k, scales)
        calls, _ = dg_calls(dg, fmt, counts, n, a, a_scales, weights, False)
        calls[0]()
        torch.cuda.synchronize()
        name = f"{model}_{gemm}_{tokens}"
        print(f"# {name} moejit spec {spec}", flush=True)
        if mode == "once":
            launch()
            calls[0]()
            torch.cuda.synchronize()
            continue
        if mode == "timeline":
            for _ in range(6):
                launch()
                torch.cuda.synchronize()
            for _ in range(5):
                calls[0]()
                torch.cuda.synchronize()
            ctas = torch.cuda.get_device_properties(0).multi_processor_count
            ours = c_room[rows:].contiguous().view(torch.int32).flatten()[:16 * ctas].view(ctas, 16).cpu().tolist()
            theirs = sfb_room[sfb.numel():].contiguous().view(torch.int32)[:16 * ctas].view(ctas, 16).cpu().tolist()
            for who, stats in (("ours", ours), ("dg", theirs)):
                for cta, v in enumerate(stats):
                    print(f"TL,{name},{who},{cta}," + ",".join(str(x & 0xffffffff) for x in v), flush=True)
            continue
        for r in range(2):
            phase(f"moejit_{name}_{r}", launch, seconds)
            time.sleep(1)
            phase(f"deepgemm_{name}_{r}", calls[0], seconds)
            time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]) if len(sys.argv) > 5 else 4)
