"""kiln under torch.distributed: launches distributed_worker.py on two GPUs with torchrun (NCCL),
each rank on its own GPU. Needs two CUDA devices: skipped (with the count found) otherwise; a
run with KILN_REQUIRE_BACKEND=cuda fails instead of skipping when CUDA is absent (conftest)."""

import os
import subprocess
import sys

import pytest

WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")


@pytest.mark.cuda
def test_two_ranks_under_torchrun_match_one_gpu():
    import torch

    count = torch.cuda.device_count()
    if count < 2:
        pytest.skip(f"needs two CUDA devices; {count} found")
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", WORKER],
        capture_output=True, text=True, timeout=600,
    )
    print(run.stdout, run.stderr)
    assert run.returncode == 0, f"torchrun failed:\n{run.stdout}\n{run.stderr}"
    for rank in (0, 1):
        assert f"rank {rank}/2 on cuda:{rank}" in run.stdout
