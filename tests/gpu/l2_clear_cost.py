#!/usr/bin/env python3
# The peers' protocol clears L2 with a 256 MB memset: it leaves up to 50 MB of dirty lines that the next
# kernel's misses must write back. Times a device copy of S MB (read + write) after: a memset (dirty),
# a read of the buffer (clean), and a memset then a read of another buffer (dirty lines written back
# before the timed kernel). Also torch._grouped_mm on Qwen3 down 16 tokens (bf16) the same ways.
import torch
dev = "cuda"
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
other = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def timed(prep, op, reps=40):
    s = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    e = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(5):
        prep(); op()
    for i in range(reps):
        prep(); s[i].record(); op(); e[i].record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in zip(s, e))
    return t[reps // 2] * 1e3
modes = {"memset": lambda: flush.zero_(), "read": lambda: flush.view(torch.float32).amax(),
         "memset+read": lambda: (flush.zero_(), other.view(torch.float32).amax())}
print("op                  MB moved  " + "  ".join(f"{m:>12}" for m in modes) + "   memset-read us")
for mb in (8, 16, 32, 64, 128, 256):
    x = torch.randn((mb << 20) // 4, device=dev)
    y = torch.empty_like(x)
    t = {m: timed(p, lambda: y.copy_(x)) for m, p in modes.items()}
    print(f"copy {mb:4d} MB       {2*mb:5d}     " + "  ".join(f"{v:12.1f}" for v in t.values()) +
          f"   {t['memset']-t['read']:6.1f}   (read-flush bw {2*mb*1.048576/t['read']:.2f} TB/s)")
g = torch.Generator(device="cpu").manual_seed(1)
E, topk, tokens, N, K = 128, 8, 16, 2048, 768
idx = torch.stack([torch.randperm(E, generator=g)[:topk] for _ in range(tokens)]).flatten()
counts = torch.bincount(idx, minlength=E)
offs = torch.cumsum(counts, 0).to(torch.int32).to(dev)
a = torch.randn(int(counts.sum()), K, device=dev, dtype=torch.bfloat16)
w = torch.randn(E, K, N, device=dev, dtype=torch.bfloat16) * 0.05
wt = w.transpose(-2, -1).contiguous().transpose(-2, -1)
t = {m: timed(p, lambda: torch._grouped_mm(a, wt, offs=offs)) for m, p in modes.items()}
active = int((counts > 0).sum())
print(f"torch._grouped_mm qwen3 down 16 ({active} experts, {active*N*K*2/1e6:.0f} MB weights): " +
      "  ".join(f"{m} {v:.1f}" for m, v in t.items()) + f"   memset-read {t['memset']-t['read']:.1f} us")
