"""kiln.torch.custom_op: kiln kernels as PyTorch custom ops with a VJP. The worked example is
the MLX docs' grid_sample with its atomic VJP kernel; its gradients are checked against
PyTorch's own ``grid_sample`` (NCHW layout adapted, align_corners=False, zeros padding) and
finite differences, in eager mode, under ``torch.compile(fullgraph=True)`` and
``torch.library.opcheck``. kiln has no float64 kernels, so the finite differences are float32
ones, on grids whose points stay 0.2 pixels inside their cells (the step moves them at most
0.03 pixels), where the result is bilinear and central differences are exact up to rounding:
tolerance 1e-3 absolute and relative. Skipped without PyTorch; the CUDA tests fail instead of
skipping when KILN_REQUIRE_BACKEND=cuda."""

import functools
import os

import numpy as np
import pytest

import kiln
from conftest import assert_close

if os.environ.get("KILN_REQUIRE_BACKEND") == "cuda":
    import torch
else:
    torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import kiln.torch  # noqa: E402
from grid_sample_pair import grid_sample, grid_sample_fn, grid_sample_vjp, interior_grid  # noqa: E402

GRID_SAMPLE = kiln.torch.custom_op("kiln_tests::grid_sample", grid_sample, vjp=grid_sample_vjp)

SCALE_EXP = kiln.metal_kernel("scale_exp", ["x", "s"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(x[i]) * s;
""")


@kiln.torch.custom_op("kiln_tests::scale_exp")
def scale_exp(x: torch.Tensor, s: float) -> torch.Tensor:
    return SCALE_EXP(inputs=[x, s], grid=(x.numel(), 1, 1), threadgroup=(64, 1, 1), output_shapes=[x.shape],
                     output_dtypes=[x.dtype])[0]


def torch_reference(x, grid):
    """PyTorch's grid_sample on the NHWC layout the kernel uses."""
    return F.grid_sample(x.permute(0, 3, 1, 2), grid, mode="bilinear", padding_mode="zeros",
                         align_corners=False).permute(0, 2, 3, 1)


def inputs(seed, device="cpu", dtype=torch.float32, shape=(2, 5, 6, 3), grid_hw=(4, 3)):
    rng = np.random.default_rng(seed)
    B, H, W, C = shape
    x = torch.tensor(rng.normal(size=shape), dtype=dtype, device=device)
    grid = torch.tensor(interior_grid(rng, B, *grid_hw, H, W), dtype=dtype, device=device)
    cot = torch.tensor(rng.normal(size=(B, *grid_hw, C)), dtype=dtype, device=device)
    return x, grid, cot


def reference_grads(x, grid, cot):
    """Output and gradients of PyTorch's grid_sample in float64."""
    x64 = x.detach().double().requires_grad_()
    g64 = grid.detach().double().requires_grad_()
    out = torch_reference(x64, g64)
    gx, gg = torch.autograd.grad(out, (x64, g64), cot.double())
    return out.detach(), gx, gg


def np64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def check_against_torch(op, x, grid, cot, dtype_name):
    x = x.detach().requires_grad_()
    grid = grid.detach().requires_grad_()
    out = op(x, grid)
    assert out.device == x.device and out.dtype == x.dtype and out.shape == cot.shape
    gx, gg = torch.autograd.grad(out, (x, grid), cot)
    assert gx.dtype == x.dtype and gg.dtype == grid.dtype, "cotangents come back in their argument's dtype"
    want, want_gx, want_gg = reference_grads(x, grid, cot)
    assert_close(np64(out), np64(want), dtype_name)
    assert_close(np64(gx), np64(want_gx), dtype_name)
    assert_close(np64(gg), np64(want_gg), dtype_name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_grid_sample_gradients_match_pytorch(dtype):
    x, grid, cot = inputs(1, dtype=dtype)
    check_against_torch(GRID_SAMPLE, x, grid, cot, str(dtype).rpartition(".")[2])


def test_grid_sample_gradients_match_finite_differences():
    x, grid, _ = inputs(2, shape=(1, 4, 5, 3), grid_hw=(3, 4))
    x.requires_grad_()
    grid.requires_grad_()
    with pytest.warns(UserWarning, match="double precision"):
        assert torch.autograd.gradcheck(GRID_SAMPLE, (x, grid), eps=1e-2, atol=1e-3, rtol=1e-3)


def test_opcheck_passes():
    x, grid, _ = inputs(3)
    torch.library.opcheck(GRID_SAMPLE, (x, grid))
    torch.library.opcheck(GRID_SAMPLE, (x.requires_grad_(), grid.requires_grad_()))
    torch.library.opcheck(scale_exp, (torch.randn(7, 5), 1.5))  # no VJP: no gradients


def test_compiled_without_graph_breaks_matches_eager():
    x, grid, cot = inputs(4)

    def loss(x, grid):
        return (GRID_SAMPLE(x, grid).sin() * cot).sum()

    compiled = torch.compile(loss, fullgraph=True)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    gs = [grid.clone().requires_grad_() for _ in range(2)]
    got = torch.autograd.grad(compiled(xs[0], gs[0]), (xs[0], gs[0]))
    eager = torch.autograd.grad(loss(xs[1], gs[1]), (xs[1], gs[1]))
    x64, g64 = x.double().requires_grad_(), grid.double().requires_grad_()
    want = torch.autograd.grad((torch_reference(x64, g64).sin() * cot.double()).sum(), (x64, g64))
    for a, b, w in zip(got, eager, want):
        assert_close(np64(a), np64(w), "float32")
        assert_close(np64(b), np64(w), "float32")


def test_fake_describes_outputs_without_running():
    from torch._subclasses.fake_tensor import FakeTensorMode

    calls = []
    kernel = kiln.metal_kernel("counting", ["x"], ["a", "b"], "uint i = thread_position_in_grid.x; a[i] = x[i]; b[0] = 1;")

    @kiln.torch.custom_op("kiln_tests::two_outputs")
    def two_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        a, b = kernel(inputs=[x], grid=(x.numel(), 1, 1), threadgroup=(32, 1, 1),
                      output_shapes=[x.shape, (1, 3)], output_dtypes=[x.dtype, torch.int32])
        return a, b

    with FakeTensorMode():
        a, b = two_outputs(torch.empty(4, 5, dtype=torch.float16))
    assert (a.shape, a.dtype, b.shape, b.dtype) == ((4, 5), torch.float16, (1, 3), torch.int32)
    assert len(calls) == 1  # the function ran once, describing; the kernel did not
    a, b = two_outputs(torch.arange(6, dtype=torch.float32))
    assert np.array_equal(a.numpy(), np.arange(6)) and b[0, 0] == 1


def test_non_tensor_arguments_and_a_vjp_of_torch_ops():
    @kiln.torch.custom_op("kiln_tests::scale_exp_grad", vjp=lambda primals, cot, out: (cot * out, None))
    def op(x: torch.Tensor, s: float) -> torch.Tensor:
        return scale_exp(x, s)

    x = torch.randn(33, requires_grad=True)
    (g,) = torch.autograd.grad(op(x, 2.5).sum(), x)
    assert_close(np64(g), 2.5 * np.exp(np64(x)), "float32")


def test_custom_function_on_tensors_is_a_torch_op():
    x, grid, cot = inputs(5)
    check_against_torch(grid_sample_fn, x, grid, cot, "float32")
    compiled = torch.compile(lambda x, grid: grid_sample_fn(x, grid) * 2, fullgraph=True, backend="aot_eager")
    x.requires_grad_()
    gx, gg = torch.autograd.grad(compiled(x, grid.requires_grad_()), (x, grid), cot)
    _, want_gx, want_gg = reference_grads(x, grid, cot)
    assert_close(np64(gx), 2 * np64(want_gx), "float32")
    assert_close(np64(gg), 2 * np64(want_gg), "float32")


def test_custom_op_from_a_custom_function_takes_its_vjp():
    op = kiln.torch.custom_op("kiln_tests::grid_sample_from_function", grid_sample_fn)
    x, grid, cot = inputs(6)
    check_against_torch(op, x, grid, cot, "float32")


def test_kiln_vjp_on_tensors_chains_through_torch_ops():
    x, grid, cot = inputs(7)
    outs, (gx, gg) = kiln.vjp(lambda x, grid: grid_sample_fn(x, grid).cos(), [x, grid], [cot])
    x64, g64 = x.double().requires_grad_(), grid.double().requires_grad_()
    want = torch_reference(x64, g64).cos()
    want_gx, want_gg = torch.autograd.grad(want, (x64, g64), cot.double())
    assert_close(np64(outs[0]), np64(want), "float32")
    assert_close(np64(gx), np64(want_gx), "float32")
    assert_close(np64(gg), np64(want_gg), "float32")


def test_bad_definitions_are_typed_errors():
    with pytest.raises(kiln.InvalidArgumentError, match="namespace::op"):
        kiln.torch.custom_op("no_namespace", grid_sample)
    bad = kiln.torch.custom_op("kiln_tests::bad_vjp", grid_sample, vjp=lambda p, c, o: (c,))
    x, grid, cot = inputs(8)
    with pytest.raises(kiln.InvalidArgumentError, match="2 cotangents"):
        bad(x.requires_grad_(), grid).backward(cot)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_cuda_grid_sample_gradients_match_pytorch(dtype):
    x, grid, cot = inputs(11, device="cuda", dtype=dtype, shape=(2, 33, 40, 8), grid_hw=(17, 9))
    check_against_torch(GRID_SAMPLE, x, grid, cot, str(dtype).rpartition(".")[2])
    check_against_torch(grid_sample_fn, x, grid, cot, str(dtype).rpartition(".")[2])


@pytest.mark.cuda
def test_cuda_compiled_on_a_side_stream():
    x, grid, cot = inputs(12, device="cuda", shape=(2, 33, 40, 8), grid_hw=(17, 9))
    compiled = torch.compile(lambda x, grid: (GRID_SAMPLE(x, grid) * cot).sum(), fullgraph=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        xs, gs = (x * 1).requires_grad_(), (grid * 1).requires_grad_()  # written on `side`
        gx, gg = torch.autograd.grad(compiled(xs, gs), (xs, gs))
    side.synchronize()
    _, want_gx, want_gg = reference_grads(x, grid, cot)
    assert_close(np64(gx), np64(want_gx), "float32")
    assert_close(np64(gg), np64(want_gg), "float32")


@pytest.mark.cuda
def test_cuda_opcheck_passes():
    x, grid, _ = inputs(13, device="cuda")
    torch.library.opcheck(GRID_SAMPLE, (x.requires_grad_(), grid.requires_grad_()))


def test_the_worked_example_in_the_docs_runs(monkeypatch):
    # Inductor's code generation is covered above; here aot_eager keeps the run short (it still
    # traces the whole graph, fake and backward included, with fullgraph=True).
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "pytorch.md")
    with open(docs) as f:
        text = f.read()
    code = text.split("```python torch\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/pytorch.md", "exec"), {"__name__": "docs_pytorch"})


def test_a_kernel_with_its_launch_description_and_a_vjp_kernel():
    from test_cookbook import GRID_SAMPLE as FORWARD_KERNEL, GRID_SAMPLE_VJP as VJP_KERNEL

    def launch(x, grid):
        shape = (x.shape[0], grid.shape[1], grid.shape[2], x.shape[3])
        return dict(output_shapes=[shape], output_dtypes=[x.dtype], template=[("T", x.dtype)],
                    grid=(shape[0] * shape[1] * shape[2] * shape[3], 1, 1), threadgroup=(256, 1, 1))

    def vjp_launch(primals, cotangent, output):
        x, grid = primals
        return dict(inputs=[x, grid, cotangent], output_shapes=[x.shape, grid.shape],
                    output_dtypes=[torch.float32] * 2, template=[("T", x.dtype)], grid=(cotangent.numel(), 1, 1),
                    threadgroup=(256, 1, 1), init_value=0)

    op = kiln.torch.custom_op("kiln_tests::grid_sample_kernel", FORWARD_KERNEL, launch=launch, vjp=VJP_KERNEL,
                              vjp_launch=vjp_launch)
    x, grid, cot = inputs(9)
    check_against_torch(op, x, grid, cot, "float32")
    torch.library.opcheck(op, (x.requires_grad_(), grid.requires_grad_()))
    with pytest.raises(kiln.InvalidArgumentError, match="launch="):
        kiln.torch.custom_op("kiln_tests::no_launch", FORWARD_KERNEL)


def test_custom_function_without_a_vjp_compiles_and_refuses_a_backward():
    @kiln.custom_function
    def plain(x):
        return scale_exp(x, 2.0)

    x = torch.randn(12)
    compiled = torch.compile(lambda x: plain(x) + 1, fullgraph=True, backend="aot_eager")
    assert_close(np64(compiled(x)), 2 * np.exp(np64(x)) + 1, "float32")
    with pytest.raises(kiln.InvalidArgumentError, match="no .vjp"):
        plain(x.requires_grad_()).sum().backward()
