#!/usr/bin/env python3
"""What a drop-in kernel (kiln.mlx) costs on MLX's CUDA build, where each call is an
``mx.fast.cuda_kernel`` primitive built from kiln's lowering (lazy), beside the eager path
(``kiln.mlx.install(lazy=False)``: evaluate, launch on kiln's stream, synchronise), MLX's own
``cuda_kernel`` written in CUDA and a pure-MLX op:

1. Host cost of one call of a tiny kernel (``out = x + 1``, 1024 float32), in µs: building the
   call (what a lazy program pays per kernel; the eager path runs the kernel inside it) and one
   call with ``mx.eval`` of its output.
2. Decode tokens/s of a small mlx-lm model whose layers call custom kernels (a Qwen3-Next of
   random weights: its gated-delta layers call mlx-lm's ``gated_delta_kernel``, a
   ``metal_kernel``) beside the same model on mlx-lm's pure-MLX fallback (``gated_delta_ops``),
   one token per step with a KV cache.

On MLX's CPU wheel only the eager path and pure MLX run (kernels on kiln's CPU emulator).

Usage: python bench/mlx_lazy_cost.py [--calls N] [--tokens N] [--layers N] [--hidden N]
"""
import argparse
import time

import kiln
import kiln.mlx

import mlx.core as mx  # noqa: E402

ADD_ONE_METAL = "uint i = thread_position_in_grid.x; out[i] = x[i] + 1;"
ADD_ONE_CUDA = "auto i = cooperative_groups::this_grid().thread_rank(); if (i < 1024) out[i] = x[i] + 1;"


def mean_us(fn, calls):
    for _ in range(max(3, calls // 10)):
        fn()
    mx.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    mx.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def lazy_available():
    """Whether MLX runs on CUDA here (its cuda_kernel exists), so the drop-in can be lazy."""
    return kiln.mlx._dlpack.mlx_has_cuda()


def host_cost(calls):
    n = 1024
    x = mx.random.normal((n,))
    mx.eval(x)
    kw = dict(grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)], output_dtypes=[mx.float32])
    rows = []
    for lazy in ([True, False] if lazy_available() else [False]):
        kiln.mlx.uninstall()
        kiln.mlx.install(force=True, lazy=lazy)
        k = mx.fast.metal_kernel(name="add_one", input_names=["x"], output_names=["out"], source=ADD_ONE_METAL)
        build = mean_us(lambda: k(inputs=[x], **kw), calls)
        run = mean_us(lambda: mx.eval(k(inputs=[x], **kw)[0]), calls)
        rows.append((f"drop-in, {'lazy (cuda_kernel)' if lazy else 'eager'}", build, run))
    if lazy_available():
        k = mx.fast.cuda_kernel(name="add_one_cuda", input_names=["x"], output_names=["out"], source=ADD_ONE_CUDA)
        build = mean_us(lambda: k(inputs=[x], **kw), calls)
        run = mean_us(lambda: mx.eval(k(inputs=[x], **kw)[0]), calls)
        rows.append(("MLX's own cuda_kernel", build, run))
    rows.append(("pure MLX (x + 1)", mean_us(lambda: x + 1, calls), mean_us(lambda: mx.eval(x + 1), calls)))
    print(f"1. tiny kernel (1024 float32), host µs per call ({calls} calls):")
    print(f"   {'path':<32} {'build the call':>15} {'call + mx.eval':>15}")
    for name, build, run in rows:
        print(f"   {name:<32} {build:15.1f} {run:15.1f}")


def small_model(layers, hidden):
    from mlx_lm.models import qwen3_next

    args = qwen3_next.ModelArgs(
        model_type="qwen3_next", hidden_size=hidden, num_hidden_layers=layers, intermediate_size=2 * hidden,
        num_attention_heads=8, linear_num_value_heads=8, linear_num_key_heads=4, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, num_experts=0, num_experts_per_tok=1,
        decoder_sparse_step=1, shared_expert_intermediate_size=0, mlp_only_layers=[], moe_intermediate_size=0,
        rms_norm_eps=1e-6, vocab_size=4096, num_key_value_heads=2, rope_theta=1e6, partial_rotary_factor=0.25,
        max_position_embeddings=4096, head_dim=hidden // 8, full_attention_interval=4)
    model = qwen3_next.Model(args)
    model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())
    return model


def tokens_per_second(model, tokens):
    cache = model.make_cache()

    def step(tok):
        return mx.argmax(model(tok[None], cache=cache)[:, -1, :], axis=-1)

    tok = mx.array([1])
    for _ in range(4):
        tok = step(tok)
        mx.eval(tok)
    start = time.perf_counter()
    for _ in range(tokens):
        tok = step(tok)
        mx.eval(tok)
    return tokens / (time.perf_counter() - start)


def decode(tokens, layers, hidden):
    print(f"2. decode, tokens/s: Qwen3-Next of random weights, {layers} layers, hidden {hidden}, bfloat16 "
          f"({tokens} tokens)")
    model = small_model(layers, hidden)
    variants = []
    if lazy_available():
        variants.append(("kernels through the drop-in, lazy", dict(lazy=True)))
    variants.append(("kernels through the drop-in, eager", dict(lazy=False)))
    variants.append(("pure-MLX fallback (gated_delta_ops)", None))
    for name, install in variants:
        kiln.mlx.uninstall()
        if install is not None:
            kiln.mlx.install(force=True, **install)
        print(f"   {name:<40} {tokens_per_second(model, tokens):10.1f}")
    kiln.mlx.uninstall()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    a = p.parse_args()
    print(f"MLX {mx.__version__}, default device {mx.default_device()}, CUDA: "
          f"{getattr(getattr(mx, 'cuda', None), 'is_available', lambda: False)()}; kiln devices: "
          f"{', '.join(d for d, _ in kiln.devices())}")
    host_cost(a.calls)
    decode(a.tokens, a.layers, a.hidden)


if __name__ == "__main__":
    main()
