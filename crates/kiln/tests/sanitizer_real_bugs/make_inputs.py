"""Writes the corpus's .npy inputs (float32, fixed seeds; the standard library only):
python3 make_inputs.py, from this folder."""

import math
import struct


def save(path, shape, values):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % dims
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


class Rng:
    def __init__(self, seed):
        self.state = seed

    def uniform(self):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % 2**64
        return (self.state >> 11) / 2**53

    def normal(self):
        u1, u2 = max(self.uniform(), 1e-300), self.uniform()
        return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


rng = Rng(7)
save("logits_p.npy", [4, 1000], [3 * rng.normal() for _ in range(4000)])
save("logits_q.npy", [4, 1000], [3 * rng.normal() for _ in range(4000)])
save("grad4.npy", [4], [0.5 + rng.uniform() for _ in range(4)])
save("rows3x300.npy", [3, 300], [4 * rng.normal() for _ in range(900)])
# Distinct values, so the top-k order is unique.
perm = list(range(256))
for i in range(255, 0, -1):
    j = int(rng.uniform() * (i + 1))
    perm[i], perm[j] = perm[j], perm[i]
save("scores2x128.npy", [2, 128], [p / 16.0 - 8.0 for p in perm])
# The gradient candle's strided reduce sums over the broadcast axis of (1, 1, 3, 4, 6).
save("grad1x1x3x4x6.npy", [1, 1, 3, 4, 6], [rng.normal() for _ in range(72)])
# One row of logits for uzu's top-k.
save("logits1x2000.npy", [1, 2000], [2 * rng.normal() for _ in range(2000)])
# Rows, weight and bias for MLX's layer norm (axis 2000: 8 SIMD groups of 32 threads).
save("rows2x2000.npy", [2, 2000], [rng.normal() for _ in range(4000)])
save("weight2000.npy", [2000], [1 + 0.1 * rng.normal() for _ in range(2000)])
save("bias2000.npy", [2000], [0.1 * rng.normal() for _ in range(2000)])
# The same for a row of 2048, which fills MLX's layer-norm group exactly (256 threads of 8).
save("rows2x2048.npy", [2, 2048], [rng.normal() for _ in range(4096)])
save("weight2048.npy", [2048], [1 + 0.1 * rng.normal() for _ in range(2048)])
save("bias2048.npy", [2048], [0.1 * rng.normal() for _ in range(2048)])
