"""Captures MLX 0.32.4's generated Metal source for the golden cases.

Each case becomes tests/golden/metal/<case>/ with a kiln spec file (kernel.toml), its input .npy
files and expected.metal: the text MLX prints between the fences of `verbose=True`, followed by the
newline that ends the print (what `kiln translate --emit metal` prints).

MLX cannot run Metal kernels on Linux, but tracing a call inside `mx.export_function` generates and
prints the source. Run with MLX installed (not a kiln dependency):

    pip install --target /tmp/mlx mlx==0.32.4 mlx-cpu==0.32.4 numpy
    PYTHONPATH=/tmp/mlx python3 crates/kiln/tests/golden/capture_mlx.py
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import tomllib

import mlx.core as mx
import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metal")
DTYPES = {
    "bool": mx.bool_, "uint8": mx.uint8, "uint16": mx.uint16, "uint32": mx.uint32,
    "uint64": mx.uint64, "int8": mx.int8, "int16": mx.int16, "int32": mx.int32,
    "int64": mx.int64, "float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32,
}
rng = np.random.default_rng(7)


def toml_str(s):
    if "'''" in s:
        raise ValueError("source contains '''")
    return "'''\n" + s + "'''" if "\n" in s else json.dumps(s)


def toml_val(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_val(x) for x in v) + "]"
    raise TypeError(v)


def apply_view(a, inp):
    """Applies the spec's view keys to an mx.array the way kiln does."""
    if "dtype" in inp:
        a = a.astype(DTYPES[inp["dtype"]])
    if "slice" in inp:
        parts = []
        for p in inp["slice"].split(","):
            nums = [int(x) if x.strip() else None for x in p.split(":")]
            parts.append(slice(*nums) if len(nums) > 1 else nums[0])
        a = a[tuple(parts)]
    if "transpose" in inp:
        a = mx.transpose(a, inp["transpose"])
    if "broadcast_to" in inp:
        a = mx.broadcast_to(a, inp["broadcast_to"])
    return a


def case(name, *, inputs, outputs, source, input_values, header="", ensure_row_contiguous=True,
         atomic_outputs=False, math_mode=None, grid=(1, 1, 1), threadgroup=(1, 1, 1), template=None,
         init_value=None):
    """inputs: names; outputs: (name, shape, dtype) triples; input_values: one per input, either
    ("file", np_array, view_keys) or ("scalar", value, dtype_or_None)."""
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    lines = ["[kernel]", f"name = {toml_val(name)}", f"input_names = {toml_val(inputs)}",
             f"output_names = {toml_val([o[0] for o in outputs])}", f"source = {toml_str(source)}"]
    if header:
        lines.append(f"header = {toml_str(header)}")
    if not ensure_row_contiguous:
        lines.append("ensure_row_contiguous = false")
    if atomic_outputs:
        lines.append("atomic_outputs = true")
    if math_mode:
        lines.append(f"math_mode = {toml_val(math_mode)}")
    lines += ["", "[call]", f"grid = {toml_val(list(grid))}", f"threadgroup = {toml_val(list(threadgroup))}",
              f"output_shapes = {toml_val([list(o[1]) for o in outputs])}",
              f"output_dtypes = {toml_val([o[2] for o in outputs])}"]
    if template:
        lines.append(f"template = {toml_val([list(t) for t in template])}")
    if init_value is not None:
        lines.append(f"init_value = {toml_val(init_value)}")
    mx_inputs = []
    for iname, spec in zip(inputs, input_values):
        lines += ["", "[[input]]"]
        if spec[0] == "file":
            _, arr, view = spec
            np.save(os.path.join(d, f"{iname}.npy"), arr)
            lines.append(f"file = {toml_val(iname + '.npy')}")
            for k, v in view.items():
                lines.append(f"{k} = {toml_val(v)}")
            mx_inputs.append(apply_view(mx.array(arr), view))
        else:
            _, value, dtype = spec
            lines.append(f"scalar = {toml_val(value)}")
            if dtype:
                lines.append(f"dtype = {toml_val(dtype)}")
                mx_inputs.append(mx.array(value, dtype=DTYPES[dtype]))
            else:
                mx_inputs.append(value)
    text = "\n".join(lines) + "\n"
    parsed = tomllib.loads(text)
    assert parsed["kernel"]["source"] == source, name

    compile_options = {"math_mode": math_mode} if math_mode else None
    kernel = mx.fast.metal_kernel(name=name, input_names=inputs, output_names=[o[0] for o in outputs],
                                  source=source, header=header, ensure_row_contiguous=ensure_row_contiguous,
                                  atomic_outputs=atomic_outputs, compile_options=compile_options)
    tmpl = None
    if template:
        tmpl = [(n, DTYPES[v] if isinstance(v, str) else v) for n, v in template]

    arrays = [x for x in mx_inputs if isinstance(x, mx.array)]

    def fn(*arrs):
        it = iter(arrs)
        ins = [next(it) if isinstance(x, mx.array) else x for x in mx_inputs]
        return kernel(inputs=ins, template=tmpl, grid=grid, threadgroup=threadgroup,
                      output_shapes=[o[1] for o in outputs], output_dtypes=[DTYPES[o[2]] for o in outputs],
                      init_value=init_value, verbose=True)

    # The print comes from C++ std::cout: capture file descriptor 1.
    with tempfile.TemporaryFile() as tmp, tempfile.TemporaryDirectory() as td:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            mx.export_function(os.path.join(td, "k.mlxfn"), fn, *arrays)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        printed = tmp.read().decode()
    head = f"Generated source code for `{name}`:\n```\n"
    assert printed.startswith(head), printed[:200]
    body = printed[len(head):]
    assert body.endswith("\n```\n"), body[-50:]
    expected = body[: -len("```\n")]
    with open(os.path.join(d, "kernel.toml"), "w") as f:
        f.write(text)
    with open(os.path.join(d, "expected.metal"), "w") as f:
        f.write(expected)
    print(f"captured {name}")


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


ALL_ATTRIBUTES = [
    "dispatch_quadgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup",
    "dispatch_threads_per_threadgroup", "grid_origin", "grid_size", "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup", "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
    "thread_execution_width", "thread_index_in_quadgroup", "thread_index_in_simdgroup",
    "thread_index_in_threadgroup", "thread_position_in_grid", "thread_position_in_threadgroup",
    "threadgroup_position_in_grid", "threadgroups_per_grid", "threads_per_grid", "threads_per_simdgroup",
    "threads_per_threadgroup",
]

case("myexp", inputs=["inp"], outputs=[("out", (4, 16), "float16")],
     source="    uint elem = thread_position_in_grid.x;\n    T tmp = inp[elem];\n    out[elem] = metal::exp(tmp);\n",
     input_values=[("file", normal(4, 16), {"dtype": "float16"})], grid=(64, 1, 1), threadgroup=(256, 1, 1),
     template=[("T", "float32")])

case("arg_test", inputs=["a", "b", "c", "d"], outputs=[("out1", (3, 2), "float32"), ("out2", (3, 2), "int32")],
     source=("        uint elem = thread_position_in_grid.x;\n        T tmp = a[0];\n"
             "        if (e) {\n            out1[elem] = a[1] + b[2] + c[3] + d + f;\n        } else {\n"
             "            out1[elem] = 1;\n        }\n        out2[elem] = a[1] + b[2] + c[1] - d;\n"),
     input_values=[("file", normal(3, 6), {}), ("file", np.array([3, 4, 5], dtype=np.int32), {}),
                   ("file", normal(2, 2), {"dtype": "bfloat16"}), ("scalar", 7.3, None)],
     grid=(6, 1, 1), threadgroup=(2, 1, 1), template=[("e", True), ("f", 3), ("T", "float16")])

strided_src = ("        uint elem = thread_position_in_grid.x;\n"
               "        uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);\n"
               "        T tmp = inp[loc];\n        out[elem] = metal::precise::exp(tmp) * threads_per_simdgroup;\n")
case("strides", inputs=["inp"], outputs=[("out", (8, 6), "float32")], source=strided_src,
     input_values=[("file", normal(6, 8), {"transpose": [1, 0]})], ensure_row_contiguous=False,
     grid=(48, 1, 1), threadgroup=(256, 1, 1), template=[("T", "float32")])

case("helper", inputs=["a"], outputs=[("out1", (2, 2), "float32")],
     header="template <typename T>\nT do_exp(T x) {\n    return metal::precise::exp(x);\n}\n",
     source="        uint elem = thread_position_in_grid.x;\n        out1[elem] = do_exp(a[elem]);\n",
     input_values=[("file", normal(2, 2), {})], grid=(4, 1, 1), threadgroup=(2, 1, 1))

case("attributes", inputs=["a"], outputs=[("out", (1, 1), "uint32")],
     source="        out[0] = threads_per_threadgroup.x;\n",
     input_values=[("file", normal(1, 1), {})], grid=(2, 1, 1), threadgroup=(2, 1, 1))

case("all_attributes", inputs=["a"], outputs=[("out", (64,), "uint32")],
     source="".join(f"    // {a}\n" for a in reversed(ALL_ATTRIBUTES)) + "    out[0] = 1;\n",
     input_values=[("file", normal(64), {})], grid=(64, 1, 1), threadgroup=(32, 1, 1))

case("dispatch_substrings", inputs=["x"], outputs=[("y", (16,), "float32")],
     source="    uint3 d = dispatch_threads_per_threadgroup;\n    uint s = dispatch_simdgroups_per_threadgroup;\n    y[0] = d.x + s;\n",
     input_values=[("file", normal(16), {})], grid=(16, 1, 1), threadgroup=(16, 1, 1))

case("atomic_outputs", inputs=["values", "idx"], outputs=[("hist", (32,), "float32"), ("counts", (32,), "int32")],
     source=("    uint i = thread_position_in_grid.x;\n    int b = idx[i];\n"
             "    atomic_fetch_add_explicit(&hist[b], values[i], memory_order_relaxed);\n"
             "    atomic_fetch_add_explicit(&counts[b], 1, memory_order_relaxed);\n"),
     input_values=[("file", normal(100), {}), ("file", rng.integers(0, 32, 100).astype(np.int32), {})],
     atomic_outputs=True, grid=(100, 1, 1), threadgroup=(64, 1, 1), init_value=0.0)

case("scalars", inputs=["flag", "count", "big", "scale", "halfscale"], outputs=[("out", (4,), "float32")],
     source="    uint i = thread_position_in_grid.x;\n    out[i] = flag ? scale * count + big : halfscale;\n",
     input_values=[("scalar", True, None), ("scalar", 3, None), ("scalar", 5000000000, None),
                   ("scalar", 0.25, None), ("scalar", 1.5, "float16")],
     grid=(4, 1, 1), threadgroup=(4, 1, 1))

case("small_inputs_with_shapes", inputs=["w", "v"], outputs=[("out", (7,), "float32")],
     source="    uint i = thread_position_in_grid.x;\n    out[i] = w[i % w_shape[0]] + v[elem_to_loc(i, v_shape, v_strides, v_ndim)];\n",
     input_values=[("file", normal(3), {}), ("file", normal(7), {})], grid=(7, 1, 1), threadgroup=(8, 1, 1))

case("no_inputs", inputs=[], outputs=[("out", (10,), "int32")],
     source="    uint i = thread_position_in_grid.x;\n    out[i] = int(i) * 2;\n",
     input_values=[], grid=(10, 1, 1), threadgroup=(10, 1, 1))

case("empty_input", inputs=["e", "x"], outputs=[("out", (9,), "float32")],
     source="    uint i = thread_position_in_grid.x;\n    out[i] = x[i] + e_ndim;\n",
     input_values=[("file", np.zeros((0, 3), dtype=np.float32), {}), ("file", normal(9), {})],
     grid=(9, 1, 1), threadgroup=(9, 1, 1))

case("negative_template", inputs=["x"], outputs=[("out", (8,), "float32")],
     source="    uint i = thread_position_in_grid.x;\n    out[i] = x[i] * OFFSET + (NEG ? 1 : 0);\n",
     input_values=[("file", normal(8), {})], grid=(8, 1, 1), threadgroup=(8, 1, 1),
     template=[("OFFSET", -3), ("NEG", False)])

case("integer_dtypes", inputs=["a", "b", "c", "d", "e", "f"],
     outputs=[("o1", (16,), "uint8"), ("o2", (16,), "int64"), ("o3", (16,), "uint64"), ("o4", (16,), "bool")],
     source=("    uint i = thread_position_in_grid.x;\n    o1[i] = a[i] + b[i];\n    o2[i] = c[i] + d[i];\n"
             "    o3[i] = e[i];\n    o4[i] = f[i] > 0;\n"),
     input_values=[("file", rng.integers(0, 100, 16).astype(np.uint8), {}),
                   ("file", rng.integers(-100, 100, 16).astype(np.int8), {}),
                   ("file", rng.integers(0, 1000, 16).astype(np.uint16), {}),
                   ("file", rng.integers(-1000, 1000, 16).astype(np.int16), {}),
                   ("file", rng.integers(0, 2**40, 16).astype(np.uint64), {}),
                   ("file", rng.integers(-2**40, 2**40, 16).astype(np.int64), {})],
     grid=(16, 1, 1), threadgroup=(16, 1, 1))

case("math_mode_fast", inputs=["a"], outputs=[("out", (4,), "float32")],
     source="    uint i = thread_position_in_grid.x;\n#if defined(__FAST_MATH__) && __FAST_MATH__\n    out[i] = 1.0;\n#else\n    out[i] = 0.0;\n#endif\n",
     input_values=[("file", normal(4), {})], math_mode="fast", grid=(4, 1, 1), threadgroup=(4, 1, 1))

case("scalar_shape_ignored", inputs=["s", "x"], outputs=[("out", (12,), "float32")],
     source="    // s_shape s_strides s_ndim are never generated for a 0-d input\n    uint i = thread_position_in_grid.x;\n    out[i] = x[i] * s + x_ndim;\n",
     input_values=[("scalar", 2.5, None), ("file", normal(3, 4), {})], grid=(12, 1, 1), threadgroup=(4, 1, 1))

case("three_outputs", inputs=["x"], outputs=[("lo", (20,), "float32"), ("hi", (20,), "float16"), ("mid", (20,), "bfloat16")],
     source="    uint i = thread_position_in_grid.x;\n    lo[i] = x[i] - 1;\n    hi[i] = x[i] + 1;\n    mid[i] = x[i];\n",
     input_values=[("file", normal(20), {})], grid=(20, 1, 1), threadgroup=(32, 1, 1))

case("substring_detection", inputs=["a", "b"], outputs=[("out", (10,), "float32")],
     source="    // data_shape mentions a_shape by accident; b is indexed through thread_index_in_threadgroup\n    out[thread_index_in_threadgroup] = a[0] + b[thread_index_in_threadgroup];\n",
     input_values=[("file", normal(10), {}), ("file", normal(10), {})], grid=(10, 1, 1), threadgroup=(10, 1, 1))

case("strided_views", inputs=["x", "y"], outputs=[("out", (3, 4), "float32")],
     source="    uint i = thread_position_in_grid.x;\n    out[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)] * y[elem_to_loc(i, y_shape, y_strides, y_ndim)];\n",
     input_values=[("file", normal(6, 4), {"slice": "::-2"}), ("file", normal(4), {"broadcast_to": [3, 4]})],
     ensure_row_contiguous=False, grid=(12, 1, 1), threadgroup=(5, 1, 1))

case("threadgroup_3d", inputs=["x"], outputs=[("out", (4, 6, 5), "float32")],
     source=("    uint3 p = thread_position_in_grid;\n    uint3 n = threads_per_grid;\n"
             "    uint idx = (p.z * n.y + p.y) * n.x + p.x;\n    out[idx] = x[idx] + threadgroup_position_in_grid.x;\n"),
     input_values=[("file", normal(4, 6, 5), {})], grid=(5, 6, 4), threadgroup=(4, 4, 2))

# MLX misplaces ") {" here (several outputs after shape parameters, no attribute): the test applies
# the correction before comparing.
case("shape_params_several_outputs_no_attributes", inputs=["a"], outputs=[("o1", (6,), "float32"), ("o2", (6,), "int32")],
     source="    o1[0] = a_shape[0];\n    o2[0] = 1;\n",
     input_values=[("file", normal(6), {})], grid=(1, 1, 1), threadgroup=(1, 1, 1))
