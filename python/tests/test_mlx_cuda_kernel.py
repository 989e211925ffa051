"""The MLX drop-in's lazy path (``kiln/mlx/_lazy.py``): on MLX's CUDA build every call of a
drop-in kernel builds, once per call signature, an ``mx.fast.cuda_kernel`` from kiln's lowering
and returns MLX's lazy outputs. MLX's CPU wheel has no ``cuda_kernel``, so these tests give the
drop-in a stand-in (``mlx_cuda_standin.StandIn``) that records what it is given: the factory's
arguments, the call's, that nothing is evaluated, that it works inside ``mx.compile``,
``mx.custom_function`` and ``mx.grad``, and what runs eagerly instead. Every source these tests
build is also compiled with NVRTC for sm_90 through kiln's ``CudaKernel``, which reproduces
MLX's wrapper (conftest's recorder). Tests marked ``cuda`` run the stand-in's kernels on a GPU
through kiln's ``CudaKernel`` and compare them with the CPU emulator; ``test_mlx_cuda.py`` runs
the drop-in on MLX's CUDA build itself."""

import os
import warnings

import ml_dtypes
import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import kiln  # noqa: E402
import kiln.mlx  # noqa: E402
from kiln import _kiln  # noqa: E402

from conftest import assert_close  # noqa: E402
from mlx_cuda_standin import StandIn, kind, nvrtc_available, to_numpy  # noqa: E402

MYEXP = "uint elem = thread_position_in_grid.x; T tmp = inp[elem]; out[elem] = metal::exp(tmp);"
# One row per threadgroup: a SIMD-group sum per 32 threads, then the group's sum across a barrier.
ROW_SUM = """
    threadgroup float partial[32];
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    float s = simd_sum(x[thread_position_in_grid.x]);
    if (lane == 0) partial[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (thread_index_in_threadgroup == 0) {
        float total = 0.0f;
        for (uint k = 0; k < simdgroups_per_threadgroup; ++k) total += partial[k];
        out[threadgroup_position_in_grid.x] = total;
    }
"""


# Each thread's Metal attributes, a SIMD-group sum and a barrier, for grids of partial groups.
WHERE_AM_I = """
    uint2 p = thread_position_in_grid.xy;
    uint i = p.x + threads_per_grid.x * p.y;
    float s = simd_sum(x[i]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i * 5 + 0] = float(thread_index_in_threadgroup);
    out[i * 5 + 1] = float(thread_position_in_threadgroup.x + 100 * thread_position_in_threadgroup.y);
    out[i * 5 + 2] = float(threads_per_threadgroup.x + 100 * threads_per_threadgroup.y);
    out[i * 5 + 3] = float(thread_index_in_simdgroup + 100 * simdgroup_index_in_threadgroup);
    out[i * 5 + 4] = s;
"""


def on_the_emulator(name, source, x, **kw):
    """The kernel's outputs on kiln's CPU emulator (NumPy in and out), the reference."""
    k = kiln.metal_kernel(name, ["x"], ["out"], source)
    return k(inputs=[to_numpy(x)], output_dtypes=[np.float32], **kw)


@pytest.fixture
def standin():
    """The drop-in installed with a recording stand-in for ``mx.fast.cuda_kernel``."""
    kiln.mlx.uninstall()
    s = StandIn()
    kiln.mlx.install(force=True, cuda_kernel=s)
    yield s
    kiln.mlx.uninstall()


@pytest.fixture
def no_eval(monkeypatch):
    """Makes any ``mx.eval`` during the test an error (the lazy path never evaluates)."""
    def refuse(*args, **kwargs):
        raise AssertionError("mx.eval was called")

    monkeypatch.setattr(mx, "eval", refuse)


def myexp_call(k, a, **kw):
    return k(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
             output_shapes=[a.shape], output_dtypes=[a.dtype], **kw)


def test_a_call_builds_cuda_kernel_from_kilns_lowering_and_returns_its_lazy_outputs(standin, no_eval):
    k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
    a = (mx.random.normal((4, 16)) * 2).astype(mx.float16)  # lazy: never evaluated here
    outs = myexp_call(k, a, init_value=0.5)
    (built,) = standin.built
    (call,) = standin.calls
    want = k.cuda_kernel_source(inputs=[a], template=[("T", mx.float32)], grid=(64, 1, 1), threadgroup=(256, 1, 1),
                                output_shapes=[a.shape], output_dtypes=[a.dtype])
    assert want["grid_input"] is None
    assert built == {key: want[key] for key in built}
    assert built["name"] == "myexp" and built["input_names"] == ["inp"] and built["output_names"] == ["out"]
    assert built["ensure_row_contiguous"] is True and built["shared_memory"] == 0
    assert built["source"] == "  ::kiln_metal::kiln_user::kiln_mlx_entry(inp, out);\n"
    assert "custom_kernel_myexp__float_float16_t_float16_t" in built["header"]
    # The call's own arguments, as MLX's cuda_kernel takes them; MLX fills init_value.
    assert call["inputs"][0] is a and len(call["inputs"]) == 1
    assert call["grid"] == (64, 1, 1) and call["threadgroup"] == (256, 1, 1)
    assert call["template"] == [("T", mx.float32)] and call["output_dtypes"] == [mx.float16]
    assert call["output_shapes"] == [(4, 16)] and call["init_value"] == 0.5 and call["verbose"] is False
    assert call["stream"] == mx.gpu, "a kernel runs on the GPU stream, as Metal's does"
    assert len(outs) == 1 and outs[0].shape == (4, 16) and outs[0].dtype == mx.float16


def test_one_cuda_kernel_per_call_signature(standin):
    k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
    a = mx.random.normal((256,))
    for _ in range(3):
        myexp_call(k, a)
    myexp_call(k, a * 2)  # same dtype, rank and size class
    assert len(standin.built) == 1 and len(standin.calls) == 4
    myexp_call(k, a.astype(mx.float16))
    myexp_call(k, mx.random.normal((2, 128)))  # another rank
    assert len(standin.built) == 3
    # A grid of partial threadgroups: another source, and the grid as one more input.
    myexp_call(k, mx.random.normal((100,)))  # one group of 100 (the threadgroup is clamped to the grid)
    assert len(standin.built) == 3
    myexp_call(k, mx.random.normal((300,)))
    built, call = standin.built[-1], standin.calls[-1]
    assert len(standin.built) == 4
    assert built["input_names"] == ["inp", "kiln_grid"]
    assert built["source"] == "  ::kiln_metal::kiln_user::kiln_mlx_entry(kiln_grid, inp, out);\n"
    grid = call["inputs"][1]
    assert grid.dtype == mx.uint32 and grid.tolist() == [300, 1, 1]
    myexp_call(k, mx.random.normal((500,)))
    assert len(standin.built) == 4, "every padded grid of the signature shares the source"
    assert standin.calls[-1]["inputs"][1].tolist() == [500, 1, 1]


def test_templates_scalars_and_small_inputs_reach_cuda_kernel_as_mlx_passes_them(standin):
    k = mx.fast.metal_kernel(name="arg_test", input_names=["a", "b", "c", "d"], output_names=["out1", "out2"],
                             source="""
        uint elem = thread_position_in_grid.x;
        T tmp = a[0];
        if (e) { out1[elem] = a[1] + b[2] + float(c[3]) + d + f; } else { out1[elem] = 1; }
        out2[elem] = a[1] + b[2] + float(c[1]) - d;
    """)
    a, c = mx.random.normal((3, 6)), mx.random.normal((2, 2)).astype(mx.bfloat16)
    kw = dict(grid=(6, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(3, 2), (3, 2)],
              output_dtypes=[mx.float32, mx.int32])
    k(inputs=[a, [3, 4, 5], c, 7.3], template=[("e", True), ("f", 3), ("T", mx.float16)], **kw)
    call = standin.calls[-1]
    assert call["inputs"][3] == 7.3, "a Python scalar goes to MLX as it is (MLX makes it a 0-d float32)"
    assert isinstance(call["inputs"][1], mx.array) and call["inputs"][1].dtype == mx.int32
    assert call["template"] == [("e", True), ("f", 3), ("T", mx.float16)]
    # MLX declares e and f as constexpr locals; the body marks them used.
    assert standin.built[-1]["source"].startswith("  (void)e; (void)f;\n")
    # A bool and an int template of equal value are different signatures.
    k(inputs=[a, [3, 4, 5], c, 7.3], template=[("e", 1), ("f", 3), ("T", mx.float16)], **kw)
    assert len(standin.built) == 2


def test_a_zero_d_input_named_inside_another_parameter_gets_positional_names(standin):
    k = mx.fast.metal_kernel(name="scale_by", input_names=["a", "data"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[i] = data[i] * a + float(data_shape[0]);
    """)
    k(inputs=[mx.array(2.0), mx.random.normal((64,))], grid=(64, 1, 1), threadgroup=(64, 1, 1),
      output_shapes=[(64,)], output_dtypes=[mx.float32])
    built = standin.built[-1]
    # MLX would find `a_shape` inside `data_shape` and pass a shape the 0-d input's signature lacks.
    assert built["input_names"] == ["kiln_in0", "kiln_in1"] and built["output_names"] == ["kiln_out0"]
    assert "kiln_in1_shape.data()" in built["source"] and "kiln_in0_" not in built["source"]


def test_inside_mx_compile(standin):
    k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)

    def f(x):
        return myexp_call(k, x)[0] * 2 + 1

    a = mx.random.normal((512,))
    out = mx.compile(f)(a)
    assert out.shape == (512,)
    mx.eval(out)
    assert np.asarray(out).tolist() == [1.0] * 512, "the stand-in's zeros went through the compiled graph"
    assert len(standin.built) == 1
    shapeless = mx.compile(f, shapeless=True)
    mx.eval(shapeless(a), shapeless(a + 1))
    assert len(standin.built) == 1


def test_inside_custom_function_vjp_and_grad(standin):
    fwd = mx.fast.metal_kernel(name="square", input_names=["x"], output_names=["y"],
                               source="uint i = thread_position_in_grid.x; y[i] = x[i] * x[i];")
    bwd = mx.fast.metal_kernel(name="square_vjp", input_names=["x", "g"], output_names=["dx"],
                               source="uint i = thread_position_in_grid.x; dx[i] = 2 * x[i] * g[i];")

    def call(k, inputs, x):
        return k(inputs=inputs, grid=(x.size, 1, 1), threadgroup=(64, 1, 1), output_shapes=[x.shape],
                 output_dtypes=[x.dtype])[0]

    @mx.custom_function
    def square(x):
        return call(fwd, [x], x)

    @square.vjp
    def square_vjp(x, cotangent, output):
        # One primal: MLX passes it (and takes its cotangent) unwrapped.
        return call(bwd, [x, cotangent], x)

    x = mx.random.normal((128,))
    grad = mx.grad(lambda v: square(v).sum())(x)
    mx.eval(grad)
    assert [b["name"] for b in standin.built] == ["square", "square_vjp"]
    assert mx.grad(mx.compile(lambda v: square(v).sum()))(x).shape == (128,)


def test_a_grid_beyond_one_cuda_launch_runs_eagerly_with_one_warning(standin):
    k = mx.fast.metal_kernel(name="tall", input_names=["x"], output_names=["out"],
                             source="uint j = thread_position_in_grid.y; out[j] = x[j % 4] + float(j);")
    x = mx.random.normal((4,))
    kw = dict(grid=(1, 70000, 1), threadgroup=(1, 1, 1), output_shapes=[(70000,)], output_dtypes=[mx.float32])
    with pytest.warns(kiln.mlx.EagerKernelWarning, match=r"\[metal_kernel tall\] runs eagerly.*65535"):
        (out,) = k(inputs=[x], **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (again,) = k(inputs=[x], **kw)
    want = np.asarray(x)[np.arange(70000) % 4] + np.arange(70000)
    assert_close(np.asarray(out), want, np.float32)
    assert_close(np.asarray(again), want, np.float32)
    assert standin.built == []


def test_a_grid_beyond_one_launch_after_a_planned_one_of_the_same_signature_runs_eagerly(standin):
    """The plan of a call signature leaves the grid out: a later grid beyond one CUDA launch is
    still refused (a kernel of another name's warning does not silence this one's)."""
    k = mx.fast.metal_kernel(name="tall", input_names=["x"], output_names=["out"],
                             source="uint j = thread_position_in_grid.y; out[j] = x[j % 4] + float(j);")
    x = mx.random.normal((4,))
    k(inputs=[x], grid=(1, 64, 1), threadgroup=(1, 1, 1), output_shapes=[(64,)], output_dtypes=[mx.float32])
    assert len(standin.calls) == 1
    with pytest.warns(kiln.mlx.EagerKernelWarning, match=r"\[metal_kernel tall\] runs eagerly.*70000.*65535"):
        (out,) = k(inputs=[x], grid=(1, 70000, 1), threadgroup=(1, 1, 1), output_shapes=[(70000,)],
                   output_dtypes=[mx.float32])
    assert len(standin.calls) == 1
    assert_close(np.asarray(out), np.asarray(x)[np.arange(70000) % 4] + np.arange(70000), np.float32)


def test_a_factory_that_refuses_runs_eagerly_and_says_why():
    def refusing(*args, **kwargs):
        raise RuntimeError("[cuda_kernel] No CUDA back-end.")

    kiln.mlx.uninstall()
    kiln.mlx.install(force=True, cuda_kernel=refusing)
    try:
        k = mx.fast.metal_kernel(name="refused", input_names=["inp"], output_names=["out"], source=MYEXP)
        a = mx.random.normal((64,))
        with pytest.warns(kiln.mlx.EagerKernelWarning, match="refused it.*No CUDA back-end"):
            (out,) = myexp_call(k, a)
        assert_close(np.asarray(out), np.exp(np.asarray(a).astype(np.float64)), np.float32)
    finally:
        kiln.mlx.uninstall()


def test_lazy_false_and_use_device_keep_the_eager_path(standin):
    k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
    a = mx.random.normal((64,))
    with kiln.mlx.use_device("cpu"):
        (out,) = myexp_call(k, a)
    assert standin.built == [] and standin.calls == []
    assert_close(np.asarray(out), np.exp(np.asarray(a).astype(np.float64)), np.float32)
    kiln.mlx.uninstall()
    kiln.mlx.install(force=True, lazy=False, cuda_kernel=None)
    (out,) = myexp_call(k, a)
    assert standin.calls == []
    assert_close(np.asarray(out), np.exp(np.asarray(a).astype(np.float64)), np.float32)


def test_a_grid_without_threads_fills_init_value_eagerly(standin):
    k = mx.fast.metal_kernel(name="nothing", input_names=["x"], output_names=["out"], source="out[0] = x[0];")
    (out,) = k(inputs=[mx.ones((4,))], grid=(0, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(3,)],
               output_dtypes=[mx.float32], init_value=2.5)
    assert np.asarray(out).tolist() == [2.5] * 3 and standin.built == []


def test_call_errors_are_raised_at_the_call(standin):
    k = mx.fast.metal_kernel(name="errs", input_names=["a"], output_names=["out"], source="out[0] = a[0];")
    a = mx.random.normal((4,))
    kw = dict(grid=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])
    with pytest.raises(ValueError, match="Expected `inputs` to have size 1 but got size 2"):
        k(inputs=[a, a], threadgroup=(1, 1, 1), **kw)
    with pytest.raises(ValueError, match="maximum allowed threads per threadgroup"):
        k(inputs=[a], threadgroup=(2048, 1, 1), **kw)
    with pytest.raises(ValueError, match="invalid template argument"):
        k(inputs=[a], threadgroup=(1, 1, 1), template=[("T", 1.5)], **kw)
    # What kiln's translation refuses fails at the call; what only NVRTC refuses fails where MLX
    # compiles the kernel, at evaluation, as on a Mac.
    bad = mx.fast.metal_kernel(name="bad", input_names=["a"], output_names=["out"], source="out[0] = a[0]; /* open")
    with pytest.raises(kiln.CompileError, match="bad"):
        bad(inputs=[a], threadgroup=(1, 1, 1), **kw)
    assert standin.built == []


def test_verbose_prints_the_metal_source_and_cuda_on_request(standin, capfd):
    k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
    a = mx.random.normal((4, 16)).astype(mx.float16)
    myexp_call(k, a, verbose=True)
    want = kiln.metal_kernel("myexp", ["inp"], ["out"], MYEXP).generate(
        inputs=[np.zeros((4, 16), np.float16)], template=[("T", np.float32)], output_shapes=[a.shape],
        output_dtypes=[np.float16])
    assert capfd.readouterr().out == f"Generated source code for `myexp`:\n```\n{want}\n```\n"
    assert standin.calls[-1]["verbose"] is False
    myexp_call(k, a, verbose="cuda")
    assert standin.calls[-1]["verbose"] is True, "MLX prints the CUDA source it compiles"


def test_fast_math_defines_the_macro_for_the_kernel(standin):
    k = mx.fast.metal_kernel(name="mode", input_names=["a"], output_names=["out"], compile_options={"math_mode": "fast"},
                             source="uint i = thread_position_in_grid.x; out[i] = a[i];")
    k(inputs=[mx.ones((4,))], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)], output_dtypes=[mx.float32])
    assert standin.built[-1]["header"].startswith("#define __FAST_MATH__ 1\n")


def test_the_source_compiles_in_kilns_reproduction_of_mlxs_wrapper():
    if not nvrtc_available():
        pytest.skip("no NVRTC")
    k = kiln.mlx.metal_kernel("row_sum", ["x"], ["out"], ROW_SUM)
    kw = dict(output_shapes=[(4,)], output_dtypes=["float32"], template=None)
    for grid in [(256, 1, 1), (250, 1, 1)]:
        got = k.cuda_kernel_source(inputs=[("float32", (250,))], grid=grid, threadgroup=(64, 1, 1), **kw)
        inputs = [("float32", (250,))] + ([("uint32", (3,))] if got["grid_input"] else [])
        cuda = _kiln.CudaKernel(got["name"], got["input_names"], got["output_names"], got["source"], got["header"],
                                got["ensure_row_contiguous"], got["shared_memory"])
        # MLX's wrapper, as kiln's CudaKernel writes it around the body.
        text = cuda._generate(inputs, [(4,)], ["float32"], [])
        assert "__global__ void custom_kernel_row_sum(" in text and got["source"] in text
        assert cuda._compile(inputs, [(4,)], ["float32"], [], (9, 0)) > 1000
    # The padded grid's threads beyond their partial group end at once; its barriers stay block barriers.
    assert "if (lin >= ntg) return;" in got["header"] and "barrier.red" not in got["header"]


def test_the_source_compiles_in_mlxs_own_wrapper_and_headers():
    """With an MLX checkout (KILN_MLX_SOURCE) and CUDA's headers (the nvidia-cuda-runtime and
    -cccl wheels PyTorch brings), MLX's own text around the body and header, as MLX's
    custom_kernel.cpp builds it, compiles with MLX's NVRTC options."""
    from mlx_cuda_standin import compile_in_mlx_wrapper, cuda_include_dirs

    root = os.environ.get("KILN_MLX_SOURCE")
    if not root or not cuda_include_dirs():
        pytest.skip("KILN_MLX_SOURCE (an MLX checkout) and CUDA's headers are needed")
    if not nvrtc_available():
        pytest.skip("no NVRTC")
    k = kiln.mlx.metal_kernel("row_sum", ["x"], ["out"], ROW_SUM)
    for grid in [(256, 1, 1), (250, 1, 1)]:
        got = k.cuda_kernel_source(inputs=[("float32", (250,))], grid=grid, threadgroup=(64, 1, 1),
                                   output_shapes=[(4,)], output_dtypes=["float32"])
        inputs = [("float32", 1)] + ([("uint32", 1)] if got["grid_input"] else [])
        log = compile_in_mlx_wrapper(root, got, inputs, ["float32"], [])
        assert "error" not in log, log


@pytest.mark.cuda
@pytest.mark.parametrize("grid,tg", [((256, 1, 1), (64, 1, 1)), ((250, 1, 1), (64, 1, 1)), ((40, 1, 1), (256, 1, 1))])
def test_stand_in_runs_of_a_barrier_kernel_match_the_emulator(grid, tg):
    kiln.mlx.uninstall()
    kiln.mlx.install(force=True, cuda_kernel=StandIn(run=True))
    try:
        k = mx.fast.metal_kernel(name="row_sum", input_names=["x"], output_names=["out"], source=ROW_SUM)
        x = mx.random.normal((grid[0],))
        groups = -(-grid[0] // tg[0])
        (out,) = k(inputs=[x], grid=grid, threadgroup=tg, output_shapes=[(groups,)], output_dtypes=[mx.float32])
        (want,) = on_the_emulator("row_sum", ROW_SUM, x, grid=grid, threadgroup=tg, output_shapes=[(groups,)])
        assert_close(np.asarray(out), want.astype(np.float64), np.float32)
    finally:
        kiln.mlx.uninstall()


@pytest.mark.cuda
@pytest.mark.parametrize("grid,tg", [((12, 10), (8, 8)), ((70, 3), (64, 2)), ((40, 3), (32, 2))])
def test_stand_in_runs_of_partial_2d_groups_give_metals_attributes(grid, tg):
    """A 2-D grid whose edge groups are partial: each Metal thread's index in its group, its
    position, its group's size and its SIMD lane and group, as the CPU emulator has them."""
    kiln.mlx.uninstall()
    kiln.mlx.install(force=True, cuda_kernel=StandIn(run=True))
    try:
        k = mx.fast.metal_kernel(name="where_am_i", input_names=["x"], output_names=["out"], source=WHERE_AM_I)
        n = grid[0] * grid[1]
        x = mx.random.normal((n,))
        kw = dict(grid=(*grid, 1), threadgroup=(*tg, 1), output_shapes=[(n * 5,)], output_dtypes=[mx.float32])
        (out,) = k(inputs=[x], **kw)
        (want,) = on_the_emulator("where_am_i", WHERE_AM_I, x, grid=kw["grid"], threadgroup=kw["threadgroup"],
                                  output_shapes=kw["output_shapes"])
        assert_close(np.asarray(out), want.astype(np.float64), np.float32)
    finally:
        kiln.mlx.uninstall()


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_stand_in_runs_of_the_docs_kernels_match_numpy(dtype):
    kiln.mlx.uninstall()
    kiln.mlx.install(force=True, cuda_kernel=StandIn(run=True))
    try:
        k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=MYEXP)
        a = mx.random.normal((7, 33)).astype(getattr(mx, dtype))
        (out,) = myexp_call(k, a)
        got = to_numpy(out).astype(np.float64)
        want = np.exp(to_numpy(a).astype(np.float64))
        assert_close(got, want, {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype])
        assert kind(out) == (dtype, (7, 33))
    finally:
        kiln.mlx.uninstall()
