"""One rank of the two-GPU test, launched by torchrun (test_distributed.py does so):

    torchrun --standalone --nproc_per_node=2 python/tests/multi_gpu/distributed_worker.py

Each rank runs a kiln body kernel and ``kiln.ops.rms_norm`` on its own GPU, on PyTorch's current
stream (a side stream, to check kiln queues there), all-reduces the result over NCCL in the
caller's process group (kiln owns no communicator), and checks the sum against the same work
done by this rank alone on its one GPU, and against NumPy in float64. Exits non-zero on any
mismatch or if a tensor is not on this rank's GPU."""

import os

import numpy as np
import torch
import torch.distributed as dist

import kiln

ROWS, D, EPS = 64, 1024, 1e-5
SCALED_EXP = kiln.metal_kernel("rank_scaled_exp", ["x", "s"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(x[i]) * s;
""")


def inputs(rank, device):
    rng = np.random.default_rng(1000 + rank)
    x = rng.normal(size=(ROWS, D)).astype(np.float32)
    w = (rng.uniform(0.5, 1.5, size=D)).astype(np.float32)
    return torch.from_numpy(x).to(device), torch.from_numpy(w).to(device), 0.5 + rank


def rank_work(x, w, s):
    (y,) = SCALED_EXP(inputs=[x, s], grid=(x.numel(), 1, 1), threadgroup=(256, 1, 1), output_shapes=[x.shape],
                      output_dtypes=[x.dtype])
    return kiln.ops.rms_norm(y, w, EPS)


def numpy_reference(world):
    total = np.zeros((ROWS, D))
    for r in range(world):
        x, w, s = (t.cpu().double().numpy() if isinstance(t, torch.Tensor) else t for t in inputs(r, "cpu"))
        y = np.exp(x) * s
        total += y / np.sqrt((y * y).mean(-1, keepdims=True) + EPS) * w
    return total


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    if not kiln.cuda_available():
        raise SystemExit(f"rank {rank}: kiln cannot reach CUDA: {kiln.cuda_status()}")
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        x, w, s = inputs(rank, device)
        out = rank_work(x, w, s)
        if out.device != device:
            raise SystemExit(f"rank {rank}: output on {out.device}, not {device}")
        dist.all_reduce(out)  # NCCL orders itself after the current (side) stream
        # The same sum on this rank's one GPU alone.
        alone = sum(rank_work(*inputs(r, device)) for r in range(world))
    side.synchronize()
    got, want = out.double().cpu().numpy(), numpy_reference(world)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    err_alone = np.linalg.norm(got - alone.double().cpu().numpy()) / np.linalg.norm(want)
    print(f"rank {rank}/{world} on {device}: rel L2 vs NumPy {err:.2e}, vs one GPU {err_alone:.2e}", flush=True)
    dist.destroy_process_group()
    if not (err <= 1e-5 and err_alone <= 1e-6):
        raise SystemExit(f"rank {rank}: all-reduced result does not match")


if __name__ == "__main__":
    main()
