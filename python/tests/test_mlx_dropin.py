"""MLX's own custom-kernel tests (the reference spec's §5), written against
``mx.fast.metal_kernel`` as MLX's test_fast.py is, on MLX's CPU wheel with kiln's drop-in
installed: each output checked against NumPy on the actual (random) inputs."""

import ml_dtypes
import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import kiln  # noqa: E402
import kiln.mlx  # noqa: E402

from conftest import assert_close  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def dropin():
    assert kiln.mlx.install(force=True)
    yield
    kiln.mlx.uninstall()


def f64(a):
    return np.asarray(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a).astype(np.float64)


def test_install_replaces_the_factory_and_reports_metal():
    assert mx.fast.metal_kernel is kiln.mlx.metal_kernel
    assert mx.metal.is_available()
    assert kiln.mlx.install()  # idempotent


def test_custom_kernel_basic():
    mx.random.seed(7)
    a = mx.random.normal(shape=(2, 2))
    kernel = mx.fast.metal_kernel(
        name="basic", input_names=["a"], output_names=["out1"],
        source="uint elem = thread_position_in_grid.x; out1[elem] = a[elem];")
    out = kernel(inputs=[a], grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)],
                 output_dtypes=[mx.float32], stream=mx.gpu)
    assert isinstance(out[0], mx.array) and out[0].shape == (2, 2) and out[0].dtype == mx.float32
    assert mx.allclose(out[0], a)
    np.testing.assert_array_equal(np.asarray(out[0]), np.asarray(a))


def test_custom_kernel_args():
    mx.random.seed(7)
    a = mx.random.normal(shape=(3, 6))
    c = mx.random.normal(shape=(2, 2)).astype(mx.bfloat16)
    kernel = mx.fast.metal_kernel(
        name="arg_test", input_names=["a", "b", "c", "d"], output_names=["out1", "out2"],
        source="""
        uint elem = thread_position_in_grid.x;
        T tmp = a[0];
        if (e) {
            out1[elem] = a[1] + b[2] + c[3] + d + f;
        } else {
            out1[elem] = 1;
        }
        out2[elem] = a[1] + b[2] + c[1] - d;
        """)
    out = kernel(
        inputs=[a, mx.array([3, 4, 5]), c, 7.3],
        template=[("e", True), ("f", 3), ("T", mx.float16)],
        grid=(6, 1, 1), threadgroup=(2, 1, 1),
        output_shapes=[(3, 2), (3, 2)], output_dtypes=[mx.float32, mx.int32], stream=mx.gpu)
    av, cv = np.asarray(a).ravel(), f64(c).ravel().astype(np.float32)
    want1 = av[1] + np.float32(5) + cv[3] + np.float32(7.3) + np.float32(3)
    assert mx.allclose(out[0], mx.full((3, 2), float(want1)))
    assert out[1].dtype == mx.int32
    want2 = int(np.trunc(av[1] + np.float32(5) + cv[1] - np.float32(7.3)))
    assert mx.array_equal(out[1], mx.full((3, 2), want2, dtype=mx.int32))


@pytest.mark.parametrize("contig", [True, False])
def test_custom_kernel_strides(contig):
    mx.random.seed(7)
    # A genuinely strided view (MLX's own test tiles, which materialises a contiguous array).
    a = mx.random.normal(shape=(6, 16))[::2].T
    source_contig = "uint elem = thread_position_in_grid.x; T tmp = inp[elem]; out[elem] = metal::exp(tmp) * threads_per_simdgroup;"
    source = """
        uint elem = thread_position_in_grid.x;
        uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
        T tmp = inp[loc];
        out[elem] = metal::exp(tmp) * threads_per_simdgroup;
    """
    kernel = mx.fast.metal_kernel(name=f"myexp{contig}", input_names=["inp"], output_names=["out"],
                                  source=source_contig if contig else source, ensure_row_contiguous=contig)
    outputs = kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[a.shape], output_dtypes=[a.dtype], stream=mx.gpu)
    assert mx.allclose(mx.exp(a) * 32, outputs[0])
    assert_close(np.asarray(outputs[0]), np.exp(f64(a)) * 32, np.float32)


def test_custom_kernel_helper():
    mx.random.seed(7)
    header = """
    template <typename T>
    T do_exp(T x) {
        return metal::precise::exp(x);
    }
    """
    a = mx.random.normal(shape=(2, 2))
    kernel = mx.fast.metal_kernel(name="helper", input_names=["a"], output_names=["out1"], header=header,
                                  source="uint elem = thread_position_in_grid.x; out1[elem] = do_exp(a[elem]);")
    out = kernel(inputs=[a], grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)],
                 output_dtypes=[mx.float32], stream=mx.gpu)
    assert mx.allclose(out[0], mx.exp(a))


def test_custom_kernel_attributes():
    a = mx.zeros(shape=(1, 1))
    kernel = mx.fast.metal_kernel(name="test_fun", input_names=["a"], output_names=["out"],
                                  source="out[0] = threads_per_threadgroup.x;")
    out = kernel(inputs=[a], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(1, 1)],
                 output_dtypes=[mx.uint32], stream=mx.gpu)[0]
    assert out.dtype == mx.uint32 and out.item() == 2


def test_custom_kernel_caching():
    def call_kernel(a, source):
        kernel = mx.fast.metal_kernel(name="my_kernel", input_names=["inp"], output_names=["out"], source=source)
        return kernel(inputs=[a], grid=(a.size, 1, 1), threadgroup=(a.size, 1, 1), output_shapes=[a.shape],
                      output_dtypes=[a.dtype], stream=mx.gpu)[0]

    a = mx.random.normal(shape=(32,))
    out = call_kernel(a, "uint elem = thread_position_in_grid.x; out[elem] = 0.0;")
    mx.eval(out)
    assert mx.array_equal(out, mx.zeros_like(out))
    out = call_kernel(a, "uint elem = thread_position_in_grid.x; out[elem] = 1.0;")
    mx.eval(out)
    assert mx.array_equal(out, mx.ones_like(out))


def test_custom_kernel_same_name_different_source_one_eval():
    a = mx.arange(32, dtype=mx.float32) + mx.random.normal(shape=(32,))
    double = mx.fast.metal_kernel(name="dup_name", input_names=["inp"], output_names=["out"],
                                  source="uint i = thread_position_in_grid.x; out[i] = inp[i] * 2;")
    add = mx.fast.metal_kernel(name="dup_name", input_names=["inp"], output_names=["out"],
                               source="uint i = thread_position_in_grid.x; out[i] = inp[i] + 100;")
    kw = dict(grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype])
    x = double(inputs=[a], **kw)[0]
    y = add(inputs=[a], **kw)[0]
    mx.eval(x, y)
    assert mx.array_equal(x, a * 2)
    assert mx.array_equal(y, a + 100)


def test_custom_metal_kernel_math_mode():
    with pytest.raises(ValueError):
        mx.fast.metal_kernel(name="math_mode", input_names=["a"], output_names=["out"], source="",
                             compile_options={"math_mode": "precise"})
    with pytest.raises(ValueError):
        mx.fast.metal_kernel(name="math_mode", input_names=["a"], output_names=["out"], source="",
                             compile_options={"unknown": "value"})
    source = """
        uint i = thread_position_in_grid.x;
    #if defined(__FAST_MATH__) && __FAST_MATH__
        out[i] = 1.0f;
    #else
        out[i] = 0.0f;
    #endif
    """
    a = mx.random.normal(shape=(4,))
    for mode, want in (("safe", 0.0), ("fast", 1.0)):
        kernel = mx.fast.metal_kernel(name="math_mode", input_names=["a"], output_names=["out"], source=source,
                                      compile_options={"math_mode": mode})
        out = kernel(inputs=[a], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
                     output_dtypes=[mx.float32])[0]
        assert mx.array_equal(out, mx.full((4,), want))


def test_custom_kernel_mixed_dtypes():
    kernel = mx.fast.metal_kernel(name="mixed_dtypes", input_names=["inp"], output_names=["out"],
                                  source="uint elem = thread_position_in_grid.x; out[elem] = inp[elem] + inp[elem];")
    x16 = mx.random.normal(shape=(32,)).astype(mx.float16)
    x32 = mx.random.normal(shape=(32,))
    kw = dict(grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32,)])
    a = kernel(inputs=[x16], output_dtypes=[mx.float16], **kw)[0]
    b = kernel(inputs=[x32], output_dtypes=[mx.float32], **kw)[0]
    out = a.astype(mx.float32) + b
    mx.eval(out)
    assert a.dtype == mx.float16
    assert_close(np.asarray(out), 2 * f64(x16) + 2 * f64(x32), np.float16)


def test_eval_exception_does_not_corrupt_state():
    b = mx.full((1024,), 3.0) * 2
    bad = mx.fast.metal_kernel(name="bad", input_names=["a"], output_names=["out"], source="this is not metal;")
    with pytest.raises(Exception):
        c = bad(inputs=[b], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                output_dtypes=[mx.float32])[0]
        mx.eval(b, c)
    assert mx.array_equal(b, mx.full((1024,), 6.0))
    assert mx.array_equal(b + 1, mx.full((1024,), 7.0))


def test_init_value_and_atomic_outputs():
    a = mx.random.normal(shape=(64,))
    idx = mx.random.randint(0, 5, shape=(64,))
    kernel = mx.fast.metal_kernel(
        name="scatter", input_names=["a", "idx"], output_names=["sums", "counts"], atomic_outputs=True,
        source="""
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&sums[idx[i]], a[i], memory_order_relaxed);
        atomic_fetch_add_explicit(&counts[idx[i]], 1.0f, memory_order_relaxed);
        """)
    sums, counts = kernel(inputs=[a, idx], grid=(64, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(5,), (5,)],
                          output_dtypes=[mx.float32, mx.float32], init_value=0.5)
    want_s = np.full(5, 0.5)
    want_c = np.full(5, 0.5)
    np.add.at(want_s, np.asarray(idx), f64(a))
    np.add.at(want_c, np.asarray(idx), 1.0)
    assert_close(np.asarray(sums), want_s, np.float32)
    np.testing.assert_array_equal(np.asarray(counts), want_c)


def test_init_value_is_cast_as_mlx_casts_it():
    a = mx.random.normal(shape=(16,))
    kernel = mx.fast.metal_kernel(name="evens", input_names=["a"], output_names=["out", "count", "flag"],
                                  source="uint i = thread_position_in_grid.x; out[2 * i] = a[2 * i];")
    out, count, flag = kernel(inputs=[a], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(16,), (3,), (2,)],
                              output_dtypes=[mx.float32, mx.int32, mx.bool_], init_value=2.75)
    want = np.full(16, 2.75, np.float32)
    want[::2] = np.asarray(a)[::2]
    np.testing.assert_array_equal(np.asarray(out), want)
    np.testing.assert_array_equal(np.asarray(count), np.full(3, 2, np.int32))
    assert flag.dtype == mx.bool_ and np.asarray(flag).all()


def test_count_and_template_errors_are_value_errors():
    a = mx.random.normal(shape=(4,))
    kernel = mx.fast.metal_kernel(name="counts", input_names=["a"], output_names=["out"], source="out[0] = a[0];")
    kw = dict(grid=(1, 1, 1), threadgroup=(1, 1, 1))
    with pytest.raises(ValueError, match="Expected `inputs` to have size 1 but got size 2"):
        kernel(inputs=[a, a], output_shapes=[(1,)], output_dtypes=[mx.float32], **kw)
    with pytest.raises(ValueError, match="Expected `output_dtypes` to have size 1 but got size 0"):
        kernel(inputs=[a], output_shapes=[(1,)], output_dtypes=[], **kw)
    with pytest.raises(ValueError, match="invalid template argument"):
        kernel(inputs=[a], output_shapes=[(1,)], output_dtypes=[mx.float32], template=[("T", 1.5)], **kw)
    with pytest.raises(ValueError, match="at least one output"):
        mx.fast.metal_kernel(name="none", input_names=["a"], output_names=[], source="")


def test_verbose_prints_mlx_source(capfd):
    a = mx.random.normal(shape=(4, 16)).astype(mx.float16)
    source = "uint elem = thread_position_in_grid.x; T tmp = inp[elem]; out[elem] = metal::exp(tmp);"
    kernel = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=source)
    kernel(inputs=[a], template=[("T", mx.float32)], grid=(64, 1, 1), threadgroup=(64, 1, 1),
           output_shapes=[a.shape], output_dtypes=[a.dtype], verbose=True)
    printed = capfd.readouterr().out
    want = kiln.metal_kernel("myexp", ["inp"], ["out"], source).generate(
        inputs=[np.asarray(a)], template=[("T", np.float32)], output_shapes=[a.shape], output_dtypes=[np.float16])
    assert printed == f"Generated source code for `myexp`:\n```\n{want}\n```\n"


def test_kernels_are_built_without_compiling():
    # Kernels built at import time never fail: compile errors wait for the first call.
    kernel = mx.fast.metal_kernel(name="never_called", input_names=["a"], output_names=["out"], source="not metal")
    assert isinstance(kernel, kiln.mlx.MetalKernel)


def test_inside_compile_is_a_clear_error():
    if kiln.mlx._cuda_kernel_factory() is not None:
        pytest.skip("kernels are lazy MLX primitives here (MLX's CUDA build): test_mlx_cuda.py runs them in mx.compile")
    kernel = mx.fast.metal_kernel(name="copy", input_names=["a"], output_names=["out"],
                                  source="uint i = thread_position_in_grid.x; out[i] = a[i];")

    def f(a):
        return kernel(inputs=[a], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
                      output_dtypes=[mx.float32])[0]

    with pytest.raises(ValueError, match="eagerly"):
        mx.compile(f)(mx.random.normal(shape=(4,)))
    with pytest.raises(ValueError, match="eagerly"):
        mx.vmap(f)(mx.random.normal(shape=(2, 4)))


def test_export_custom_metal_kernel_without_evaluation(tmp_path):
    # Export records MLX's own kernel (for a Mac to run), as it does without Metal.
    kernel = mx.fast.metal_kernel(name="copy", input_names=["a"], output_names=["out"],
                                  source="uint i = thread_position_in_grid.x; out[i] = a[i];")

    def f(a):
        return kernel(inputs=[a], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(4,)],
                      output_dtypes=[mx.float32])[0]

    a = mx.random.normal(shape=(4,))
    mx.export_function(str(tmp_path / "copy.mlxfn"), f, a)
    mx.export_function(str(tmp_path / "copy_shapeless.mlxfn"), f, a, shapeless=True)
    assert (tmp_path / "copy.mlxfn").stat().st_size > 0 and (tmp_path / "copy_shapeless.mlxfn").stat().st_size > 0
    assert mx.array_equal(f(a), a)  # and outside the export, kiln runs it


def test_uninstall_restores_mlx_and_kernels_built_before_keep_running():
    a = mx.random.normal(shape=(8,))
    source = "uint i = thread_position_in_grid.x; out[i] = a[i] * 3;"
    ours = mx.fast.metal_kernel(name="triple", input_names=["a"], output_names=["out"], source=source)
    kiln.mlx.uninstall()
    try:
        assert mx.fast.metal_kernel is not kiln.mlx.metal_kernel
        if mx.metal.is_available():
            pytest.skip("MLX has its own Metal back-end here")
        theirs = mx.fast.metal_kernel(name="triple", input_names=["a"], output_names=["out"], source=source)
        with pytest.raises(RuntimeError, match="No Metal back-end"):
            mx.eval(theirs(inputs=[a], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)],
                           output_dtypes=[mx.float32]))
        out = ours(inputs=[a], grid=(8, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(8,)],
                   output_dtypes=[mx.float32])[0]
        assert mx.array_equal(out, a * 3)
    finally:
        kiln.mlx.install(force=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "uint8", "bool"])
def test_every_dtype_round_trips_in_place(dtype):
    mdt = getattr(mx, "bool_" if dtype == "bool" else dtype)
    a = (mx.random.normal(shape=(5, 7)) * 50).astype(mdt)
    b = (mx.random.normal(shape=(5, 7)) * 50).astype(mdt)
    kernel = mx.fast.metal_kernel(name="pick", input_names=["a", "b"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[i] = (i % 3 == 0) ? a[i] : b[i];
    """)
    out = kernel(inputs=[a, b[::1]], grid=(35, 1, 1), threadgroup=(16, 1, 1), output_shapes=[(5, 7)],
                 output_dtypes=[mdt])[0]
    assert out.dtype == mdt
    want = np.where(np.arange(35).reshape(5, 7) % 3 == 0, f64(a), f64(b))
    np.testing.assert_array_equal(f64(out), want)


def test_array_likes_are_converted_as_mlx_converts_them():
    a = np.random.default_rng(3).normal(size=(6,)).astype(np.float16)
    kernel = mx.fast.metal_kernel(name="mix", input_names=["a", "b", "c"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[i] = float(a[i]) * b[i % 3] + c;
    """)
    (out,) = kernel(inputs=[a, [1, 2, 3], np.float32(0.25)], grid=(6, 1, 1), threadgroup=(6, 1, 1),
                    output_shapes=[(6,)], output_dtypes=[mx.float32])
    assert isinstance(out, mx.array)
    want = a.astype(np.float64) * np.array([1, 2, 3, 1, 2, 3]) + 0.25
    assert_close(np.asarray(out), want, np.float32)


def test_use_device_runs_on_kilns_own_buffers_and_copies_back():
    # The path kiln.testing's kiln_device takes for "cuda:N" on MLX's CPU build, on the CPU here.
    a = (mx.random.normal(shape=(4, 9)) * 3).astype(mx.bfloat16)
    if a.__dlpack_device__()[0] != 1:
        pytest.skip("MLX arrays live on a GPU here (MLX's CUDA build)")
    kernel = mx.fast.metal_kernel(name="split", input_names=["a"], output_names=["x2", "trunc", "half"], source="""
        uint i = thread_position_in_grid.x;
        if (i % 2 == 0) { x2[i] = a[i] * 2; }
        trunc[i] = int(a[i]);
        half[i] = float(a[i]);  // bfloat reaches half through float (Metal converts them to each other only explicitly)
    """)
    with kiln.mlx.use_device("cpu"):
        x2, trunc, half = kernel(inputs=[a], grid=(36, 1, 1), threadgroup=(8, 1, 1), init_value=-1.5,
                                 output_shapes=[a.shape] * 3, output_dtypes=[mx.bfloat16, mx.int32, mx.float16])
    assert (x2.dtype, trunc.dtype, half.dtype) == (mx.bfloat16, mx.int32, mx.float16)
    av = f64(a)
    want = np.where(np.arange(36).reshape(4, 9) % 2 == 0, av * 2, -1.5)
    np.testing.assert_array_equal(f64(x2), want)
    np.testing.assert_array_equal(np.asarray(trunc), np.trunc(av).astype(np.int32))
    np.testing.assert_array_equal(f64(half), av)


def test_plain_calls_on_mlx_cpu_arrays_are_read_and_run_in_the_extension(monkeypatch):
    # MLX arrays (lazy, strided, 0-d, bfloat16) and Python scalars in a list or a tuple: the
    # extension's path alone serves the call, so the general path is made to fail.
    if kiln.mlx._host_types() is None:
        pytest.skip("kernels on MLX arrays are lazy MLX primitives here (MLX's CUDA build)")
    monkeypatch.setattr(kiln.mlx, "_evaluate", lambda mx_, arrays: pytest.fail("took the general path"))
    kernel = mx.fast.metal_kernel(name="host_mix", input_names=["a", "b", "s", "k"], output_names=["y", "z"],
                                  source="""
        uint i = thread_position_in_grid.x;
        y[i] = bfloat16_t(float(a[i]) * s + float(b[i % 8]));
        z[i] = a[i] * k;
    """, ensure_row_contiguous=True)
    mx.random.seed(11)
    a = (mx.random.normal(shape=(8, 12)) + 2).T  # lazy and transposed: read row-contiguous
    b = mx.random.normal(shape=(8,)).astype(mx.bfloat16)
    s = mx.array(0.75)
    for args in ([a, b, s, 3], (a, b, s, 3)):
        y, z = kernel(inputs=args, grid=(96, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(12, 8), (12, 8)],
                      output_dtypes=[mx.bfloat16, mx.float32])
        assert (y.dtype, z.dtype, y.shape, z.shape) == (mx.bfloat16, mx.float32, (12, 8), (12, 8))
        flat = f64(a).reshape(-1)
        want_y = flat * 0.75 + np.tile(f64(b), 12)
        assert_close(f64(y).reshape(-1), want_y, ml_dtypes.bfloat16)
        np.testing.assert_array_equal(np.asarray(z).reshape(-1), (np.asarray(a).reshape(-1) * np.float32(3)))
    # An input the extension does not read (a NumPy array) is converted as MLX converts it first.
    (z,) = mx.fast.metal_kernel(name="host_np", input_names=["a"], output_names=["z"],
                                source="uint i = thread_position_in_grid.x; z[i] = a[i] + 1;")(
        inputs=[np.arange(5, dtype=np.float32)], grid=(5, 1, 1), threadgroup=(5, 1, 1), output_shapes=[(5,)],
        output_dtypes=[mx.float32])
    np.testing.assert_array_equal(np.asarray(z), np.arange(5, dtype=np.float32) + 1)
    # Errors in the arguments name the kernel as the general path's do.
    with pytest.raises(kiln.KilnError, match="host_np"):
        mx.fast.metal_kernel(name="host_np", input_names=["a"], output_names=["z"],
                             source="uint i = thread_position_in_grid.x; z[i] = a[i] + 1;")(
            inputs=[mx.zeros((5,))], grid=(5, 0, 1), threadgroup=(5, 1, 1), output_shapes=[(5,)],
            output_dtypes=[mx.float32])


def test_output_shapes_and_dtypes_as_iterators_are_read_once():
    # The extension's path takes lists and tuples only and leaves an iterator unconsumed for the
    # general path, which reads it.
    if kiln.mlx._host_types() is None:
        pytest.skip("kernels on MLX arrays are lazy MLX primitives here (a cuda_kernel factory is installed)")
    a = mx.random.normal(shape=(6,))
    kernel = mx.fast.metal_kernel(name="iter_args", input_names=["a"], output_names=["out"],
                                  source="uint i = thread_position_in_grid.x; out[i] = a[i] * 2;")
    (out,) = kernel(inputs=[a], grid=(6, 1, 1), threadgroup=(6, 1, 1), output_shapes=(s for s in [(6,)]),
                    output_dtypes=iter([mx.float32]))
    np.testing.assert_array_equal(np.asarray(out), np.asarray(a) * np.float32(2))
