#!/usr/bin/env python3
"""What a tile of the warpgroup attention prefill costs besides its key tiles: full attention
B4 H32 Tq 4096 over Tk = 4096 / 2048 / 1024 / 512 / 256 keys (32 ... 2 key tiles a tile) and
causal T = 4096 / 2048, bf16, D = 128 and 64, through ``kiln.ops.scaled_dot_product_attention``
on PyTorch CUDA tensors. Each time is the median of 30 calls back to back after 5 warm-up calls
(CUDA events, no L2 flush). A line through the time per tile of a block against the key tiles
gives the time per key tile and the time per tile besides (printed).

Usage (on the GPU machine, with kiln and torch installed):
    python bench/attention_tile_cost.py
"""
import torch

import kiln

SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 132


def median_ms(fn, calls=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def line(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def main():
    gen = torch.Generator(device="cuda").manual_seed(1)
    rand = lambda *shape: torch.rand(shape, device="cuda", generator=gen).to(torch.bfloat16)  # noqa: E731
    print(f"device: {torch.cuda.get_device_name()}; kiln {kiln.__version__}; torch {torch.__version__}")
    for d in (128, 64):
        q = rand(4, 32, 4096, d)
        tiles_per_block = 4 * 32 * -(-4096 // (128 if d == 128 else 192)) / SMS
        key_tiles, per_tile = [], []
        for tk in (4096, 2048, 1024, 512, 256):
            k, v = rand(4, 32, tk, d), rand(4, 32, tk, d)
            ms = median_ms(lambda: kiln.ops.scaled_dot_product_attention(q, k, v, scale=d ** -0.5))
            print(f"D{d} full Tq 4096 Tk {tk}: {ms:.4f} ms")
            key_tiles.append(tk // 128)
            per_tile.append(ms * 1e3 / tiles_per_block)
        slope, besides = line(key_tiles, per_tile)
        print(f"D{d}: {slope:.3f} us per key tile, {besides:.2f} us per tile besides "
              f"({100 * besides / (32 * slope + besides):.1f} % of a tile at Tk 4096)")
        for t in (4096, 2048):
            qq, kk = rand(4, 32, t, d), rand(4, 32, t, d)
            ms = median_ms(lambda: kiln.ops.scaled_dot_product_attention(qq, kk, kk, scale=d ** -0.5, mask="causal"))
            print(f"D{d} causal T {t}: {ms:.4f} ms")


if __name__ == "__main__":
    main()
