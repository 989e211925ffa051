#!/usr/bin/env python3
"""Generates the Metal vector types of the common prelude:

- prelude/common/vec.h: vec<T,N> (N = 2, 3, 4) with Metal's size and alignment (a 3-vector
  occupies 4 elements);
- prelude/common/packed.h: packed_vec<T,N> (`packed_float3`, ...): the same components with the
  scalar's alignment and no padding (sizeof(packed_float3) == 12), converting to and from vec.

Both have their constructors (`constexpr`, so `constant float4 k = float4(...)` is initialised at
compile time), component access (`v.x` and `v.r` name the same storage), indexing, postfix
++/--, and every swizzle (xyzw and rgba, read by value through `v.xy()`, written through
`v.xy_ref() = ...`; the lowering rewrites `v.xy` into these calls).

Run from the crate directory:  python3 prelude/gen_vec.py
(`--check` compares instead of writing, and fails on a difference.)
"""
import itertools
import os
import sys

COMP = "xyzw"
RGBA = "rgba"
SCALARS = [
    ("float", "float"), ("half", "half"), ("bfloat", "bfloat"), ("int", "int"), ("uint", "uint"),
    ("short", "short"), ("ushort", "ushort"), ("char", "signed char"), ("uchar", "uchar"),
    ("bool", "bool"), ("long", "long"), ("ulong", "unsigned long"),
]
# Metal has no packed bool vectors.
PACKED_SCALARS = [s for s in SCALARS if s[0] != "bool"]


def ctor_shapes(n):
    """Argument shapes (sizes of each part) that build an n-vector from scalars and vectors."""
    shapes = []
    def rec(rest, acc):
        if rest == 0:
            if len(acc) > 1 and any(a > 1 for a in acc):
                shapes.append(tuple(acc))
            return
        for k in range(1, rest + 1):
            if k < n:
                rec(rest - k, acc + [k])
    rec(n, [])
    return shapes


def struct(n, packed):
    """The specialisation of vec (or packed_vec) for n components."""
    comps = COMP[:n]
    name = "packed_vec" if packed else "vec"
    other = "vec" if packed else "packed_vec"
    out = []
    if packed:
        out.append(f"template <class T> struct packed_vec<T, {n}> {{")
    else:
        align = "4" if n == 3 else str(n)
        out.append(f"template <class T> struct alignas({align} * sizeof(T)) vec<T, {n}> {{")
    # `v.r` is `v.x`: both names of a component share storage, so user structs with members
    # named `r`/`a` need no rewriting.
    out.append("  " + " ".join(f"union {{ T {c}; T {RGBA[i]}; }};" for i, c in enumerate(comps)))
    out.append(f"  {name}() = default;")
    out.append("  template <class U, class = typename kiln::enable_if<kiln::is_scalar<U>::value>::type>")
    out.append(f"  KILN_HD constexpr {name}(U s) : {', '.join(f'{c}(T(s))' for c in comps)} {{}}")
    args = ", ".join(f"T {c}_" for c in comps)
    out.append(f"  KILN_HD constexpr {name}({args}) : {', '.join(f'{c}({c}_)' for c in comps)} {{}}")
    from_o = ", ".join(f"{c}(T(o.{c}))" for c in comps)
    out.append("  template <class U>")
    if packed:
        out.append(f"  KILN_HD constexpr explicit packed_vec(const packed_vec<U, {n}>& o) : {from_o} {{}}")
        out.append("  template <class U>")
        out.append(f"  KILN_HD constexpr explicit packed_vec(const vec<U, {n}>& o) : {from_o} {{}}")
        out.append(f"  KILN_HD constexpr packed_vec(const vec<T, {n}>& o) : {', '.join(f'{c}(o.{c})' for c in comps)} {{}}")
        out.append(f"  KILN_HD constexpr operator vec<T, {n}>() const {{ return vec<T, {n}>({', '.join(comps)}); }}")
    else:
        # Converted element by element while constant-evaluated; at run time by vec_convert,
        # which a target may specialise (paired CUDA instructions), with the same bits.
        lazy = ", ".join(f"{c}(kiln::is_constant_evaluated() ? T(o.{c}) : T())" for c in comps)
        out.append(f"  KILN_HD constexpr explicit vec(const vec<U, {n}>& o) : {lazy} {{")
        out.append(f"    if (!kiln::is_constant_evaluated()) kiln::vec_convert<T, U, {n}>::run(*this, o);")
        out.append("  }")
        out.append("  template <class U>")
        out.append(f"  KILN_HD constexpr explicit vec(const {other}<U, {n}>& o) : {from_o} {{}}")
    # A brace list shorter than the vector (`uint4 k = {a, b, c}`, MLX's random.metal) sets the
    # components it lists and zeroes the rest, as Metal's vector initialiser lists do.
    for m in range(2, n):
        short = ", ".join(f"T {c}_" for c in comps[:m])
        inits = ", ".join(f"{c}({c}_)" if i < m else f"{c}(T(0))" for i, c in enumerate(comps))
        out.append(f"  KILN_HD constexpr {name}({short}) : {inits} {{}}")
    for shape in ctor_shapes(n):
        params, inits, idx = [], [], 0
        for p, size in enumerate(shape):
            if size == 1:
                params.append(f"T a{p}")
                inits.append(f"{comps[idx]}(a{p})")
            else:
                params.append(f"const vec<T, {size}>& a{p}")
                for j in range(size):
                    inits.append(f"{comps[idx + j]}(a{p}.{COMP[j]})")
            idx += size
        out.append(f"  KILN_HD constexpr {name}({', '.join(params)}) : {', '.join(inits)} {{}}")
    out.append("  KILN_HD T& operator[](int i) { return (&x)[i]; }")
    out.append("  KILN_HD const T& operator[](int i) const { return (&x)[i]; }")
    # Postfix forms return the old value; the prefix operators are free functions.
    for op in ("++", "--"):
        out.append(f"  KILN_HD {name} operator{op}(int) {{ {name} old = *this; {op}*this; return old; }}")
    for k in range(2, 5):
        for sw in itertools.product(range(n), repeat=k):
            for names in (COMP, RGBA):
                sname = "".join(names[i] for i in sw)
                vals = ", ".join(COMP[i] for i in sw)
                out.append(f"  KILN_HD constexpr vec<T, {k}> {sname}() const {{ return vec<T, {k}>({vals}); }}")
                if len(set(sw)) == k:
                    ptrs = ", ".join(f"&{COMP[i]}" for i in sw)
                    out.append(f"  KILN_HD kiln::swizzle_ref<T, {k}> {sname}_ref() {{ return kiln::swizzle_ref<T, {k}>{{{{{ptrs}}}}}; }}")
    out.append("};")
    return "\n".join(out)


def vec_header():
    out = []
    out.append("// kiln common prelude: Metal vector types. GENERATED by prelude/gen_vec.py; do not edit.")
    out.append("// vec<T,N> has Metal's size and alignment (a 3-vector occupies 4 elements).")
    out.append("#pragma once\n")
    out.append("template <class T, int N> struct vec;")
    out.append("template <class T, int N> struct packed_vec;")
    out.append("namespace kiln {")
    out.append("// A writable swizzle (`v.zx = ...`): pointers to the selected components.")
    out.append("template <class T, int K> struct swizzle_ref {")
    out.append("  T* p[K];")
    out.append("  KILN_HD operator vec<T, K>() const { vec<T, K> r; for (int i = 0; i < K; ++i) r[i] = *p[i]; return r; }")
    out.append("  KILN_HD swizzle_ref& operator=(const vec<T, K>& v) { vec<T, K> t = v; for (int i = 0; i < K; ++i) *p[i] = t[i]; return *this; }")
    for op in ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"]:
        out.append(f"  KILN_HD swizzle_ref& operator{op}=(const vec<T, K>& v) {{ vec<T, K> t = v; for (int i = 0; i < K; ++i) *p[i] = *p[i] {op} t[i]; return *this; }}")
    out.append("};")
    out.append("// The element-wise conversion behind `vec<T,N>(vec<U,N>)`; a target may specialise it (the")
    out.append("// CUDA prelude converts float pairs to half or bfloat with one instruction).")
    out.append("template <class T, class U, int N> struct vec_convert {")
    out.append("  KILN_HD static void run(vec<T, N>& r, const vec<U, N>& o) { for (int i = 0; i < N; ++i) r[i] = T(o[i]); }")
    out.append("};")
    out.append("}  // namespace kiln\n")
    for n in (2, 3, 4):
        out.append(struct(n, packed=False))
        out.append("")
    for name, ty in SCALARS:
        for n in (2, 3, 4):
            out.append(f"typedef vec<{ty}, {n}> {name}{n};")
    out.append("typedef half2 float16_t2;")
    return "\n".join(out) + "\n"


# Operators of packed vectors: each operand is taken as its vec (a packed_vec converts, anything
# else stays as it is) and vec's operator decides the result.
PACKED_OPS = r"""
namespace kiln {
template <class X> struct unpacked_ { typedef X type; };
template <class T, int N> struct unpacked_<packed_vec<T, N>> { typedef vec<T, N> type; };
template <class X> using unpacked = typename unpacked_<typename remove_cv<X>::type>::type;
template <class X> struct is_packed_ { static constexpr bool value = false; };
template <class T, int N> struct is_packed_<packed_vec<T, N>> { static constexpr bool value = true; };
template <class A, class B> struct any_packed {
  static constexpr bool value = is_packed_<typename remove_cv<A>::type>::value || is_packed_<typename remove_cv<B>::type>::value;
};
}  // namespace kiln

#define KILN_PACKED_BINOP(OP)                                                                   \
  template <class A, class B, class = typename kiln::enable_if<kiln::any_packed<A, B>::value>::type> \
  KILN_HD inline auto operator OP(const A& a, const B& b)                                       \
      ->decltype(kiln::unpacked<A>(a) OP kiln::unpacked<B>(b)) {                                \
    return kiln::unpacked<A>(a) OP kiln::unpacked<B>(b);                                        \
  }
#define KILN_PACKED_ASSIGN(OP)                                                                  \
  KILN_PACKED_BINOP(OP)                                                                         \
  template <class T, int N, class B>                                                            \
  KILN_HD inline packed_vec<T, N>& operator OP##=(packed_vec<T, N>& a, const B& b) {            \
    a = packed_vec<T, N>(vec<T, N>(vec<T, N>(a) OP kiln::unpacked<B>(b)));                      \
    return a;                                                                                   \
  }
KILN_PACKED_ASSIGN(+) KILN_PACKED_ASSIGN(-) KILN_PACKED_ASSIGN(*) KILN_PACKED_ASSIGN(/) KILN_PACKED_ASSIGN(%)
KILN_PACKED_ASSIGN(&) KILN_PACKED_ASSIGN(|) KILN_PACKED_ASSIGN(^) KILN_PACKED_ASSIGN(<<) KILN_PACKED_ASSIGN(>>)
KILN_PACKED_BINOP(<) KILN_PACKED_BINOP(>) KILN_PACKED_BINOP(<=) KILN_PACKED_BINOP(>=) KILN_PACKED_BINOP(==)
KILN_PACKED_BINOP(!=) KILN_PACKED_BINOP(&&) KILN_PACKED_BINOP(||)
#undef KILN_PACKED_ASSIGN
#undef KILN_PACKED_BINOP
template <class T, int N> KILN_HD inline vec<T, N> operator-(const packed_vec<T, N>& a) { return -vec<T, N>(a); }
template <class T, int N> KILN_HD inline vec<T, N> operator+(const packed_vec<T, N>& a) { return vec<T, N>(a); }
template <class T, int N> KILN_HD inline vec<T, N> operator~(const packed_vec<T, N>& a) { return ~vec<T, N>(a); }
template <class T, int N> KILN_HD inline vec<bool, N> operator!(const packed_vec<T, N>& a) { return !vec<T, N>(a); }
template <class T, int N> KILN_HD inline packed_vec<T, N>& operator++(packed_vec<T, N>& a) { a += T(1); return a; }
template <class T, int N> KILN_HD inline packed_vec<T, N>& operator--(packed_vec<T, N>& a) { a -= T(1); return a; }
"""


def packed_header():
    out = []
    out.append("// kiln common prelude: Metal packed vector types. GENERATED by prelude/gen_vec.py; do not edit.")
    out.append("// packed_vec<T,N> holds N components with T's alignment and no padding (packed_float3 is")
    out.append("// 12 bytes); it converts implicitly to and from vec<T,N>, and its arithmetic is vec's.")
    out.append("#pragma once\n")
    for n in (2, 3, 4):
        out.append(struct(n, packed=True))
        out.append("")
    for name, ty in PACKED_SCALARS:
        for n in (2, 3, 4):
            out.append(f"typedef packed_vec<{ty}, {n}> packed_{name}{n};")
    out.append(PACKED_OPS.rstrip())
    return "\n".join(out) + "\n"


def main():
    """Writes the headers; with --check, writes nothing and fails when a header differs from
    what this script generates (CI runs it so an edit to either is not lost)."""
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check:
        sys.exit("usage: gen_vec.py [--check]")
    here = os.path.dirname(os.path.abspath(__file__))
    stale = []
    for name, text in (("vec.h", vec_header()), ("packed.h", packed_header())):
        path = os.path.join(here, "common", name)
        if check:
            with open(path) as f:
                if f.read() != text:
                    stale.append(path)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        sys.exit("not what prelude/gen_vec.py generates (edit the script and rerun it): " + ", ".join(stale))


if __name__ == "__main__":
    main()
