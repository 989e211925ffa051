#!/usr/bin/env python3
"""One cached ``kiln.metal_kernel`` call from Python on "CUDA" tensors, without a GPU: the loop
that bench/python-host-instructions.sh counts under callgrind.

PyTorch CPU tensors stand in for CUDA tensors (``get_device`` answers 0, ``is_cuda`` True, the
current device and stream are 0, the allocations ignore ``device=``) and kiln's CUDA backend
runs against bench/stand-in-driver (launches do nothing). The stand-ins are Python functions,
so their own cost is in the count; it is the same whatever kiln's call path does.

    python bench/python_host_instructions.py CALLS
runs the warm-up calls, then ``CALLS`` calls inside ``exec`` (the function the script counts).
"""
import sys

import torch

import kiln

torch.Tensor.get_device = lambda self: 0
torch.Tensor.is_cuda = property(lambda self: True)
torch._C._cuda_getDevice = lambda: 0
torch._C._cuda_getCurrentRawStream = lambda ordinal: 0


def _on_host(allocate):
    def allocate_on_host(*args, device=None, **kwargs):
        return allocate(*args, **kwargs)

    return allocate_on_host


for _name in ("empty", "empty_strided", "empty_like", "full"):
    setattr(torch, _name, _on_host(getattr(torch, _name)))

calls = int(sys.argv[1])
if not kiln.cuda_available():
    sys.exit(f"kiln's CUDA backend is unavailable (is the stand-in driver on LD_LIBRARY_PATH?): {kiln.cuda_status()}")
x = torch.randn(1)
kernel = kiln.metal_kernel("add_one", ["x"], ["out"], "uint i = thread_position_in_grid.x; out[i] = x[i] + 1.0f;")


def call():
    return kernel(inputs=[x], output_shapes=[(1,)], output_dtypes=[torch.float32], grid=(1, 1, 1),
                  threadgroup=(32, 1, 1))


for _ in range(200):
    call()
exec(f"for _ in range({calls}):\n    call()")
