//! MLX's kernel-name mangling for `metal_kernel`: `custom_kernel_` + name + template suffix (the
//! double underscore) + per-input type and address-space markers + per-output types.

use std::borrow::Cow;

use crate::dtype::DType;

/// A template parameter's name: borrowed for literal names (no allocation), owned otherwise.
pub type TemplateName = Cow<'static, str>;

/// A template argument: a dtype (`typename`), a 32-bit int or a bool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TemplateArg {
    /// A type argument (`typename`).
    DType(DType),
    /// An `int` argument.
    Int(i32),
    /// A `bool` argument.
    Bool(bool),
}

impl TemplateArg {
    /// The template-parameter kind keyword in the generated `template <...>` line.
    pub fn param_keyword(&self) -> &'static str {
        match self {
            TemplateArg::DType(_) => "typename",
            TemplateArg::Int(_) => "int",
            TemplateArg::Bool(_) => "bool",
        }
    }

    /// The argument as C++ text inside `<...>` (bools as 1/0, as a C++ stream prints them).
    pub fn render(&self) -> String {
        match self {
            TemplateArg::DType(d) => d.metal_type().to_string(),
            TemplateArg::Int(v) => v.to_string(),
            TemplateArg::Bool(b) => (*b as u8).to_string(),
        }
    }
}

/// `<a1, a2, ...>` for the explicit instantiation.
pub fn render_template_args(template: &[(TemplateName, TemplateArg)]) -> String {
    let items: Vec<String> = template.iter().map(|(_, a)| a.render()).collect();
    format!("<{}>", items.join(", "))
}

/// What mangling needs to know of one input.
#[derive(Clone, Copy, Debug)]
pub struct InputKind {
    /// The input's element type.
    pub dtype: DType,
    /// Number of axes.
    pub ndim: usize,
    /// Number of elements.
    pub size: usize,
}

/// The mangled Metal kernel name, identical to MLX 0.32.4's (a negative int template's `-`
/// becomes `_`, which keeps the name an identifier).
pub fn metal_kernel_name(
    name: &str,
    template: &[(TemplateName, TemplateArg)],
    inputs: &[InputKind],
    outputs: &[DType],
) -> String {
    let mut out = format!("custom_kernel_{name}");
    if !template.is_empty() {
        out.push('_');
        for (_, arg) in template {
            out.push('_');
            match arg {
                TemplateArg::Int(v) => out.push_str(&v.to_string().replace('-', "_")),
                _ => out.push_str(&arg.render()),
            }
        }
    }
    for input in inputs {
        out.push('_');
        out.push_str(input.dtype.metal_type());
        if input.ndim == 0 {
            out.push('s');
        } else if input.size < 8 {
            out.push('c');
        }
    }
    for d in outputs {
        out.push('_');
        out.push_str(d.metal_type());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_mlx_arg_test_example() {
        let template = vec![
            ("e".into(), TemplateArg::Bool(true)),
            ("f".into(), TemplateArg::Int(3)),
            ("T".into(), TemplateArg::DType(DType::F16)),
        ];
        let inputs = [
            InputKind { dtype: DType::F32, ndim: 2, size: 18 },
            InputKind { dtype: DType::I32, ndim: 1, size: 3 },
            InputKind { dtype: DType::BF16, ndim: 2, size: 4 },
            InputKind { dtype: DType::F32, ndim: 0, size: 1 },
        ];
        assert_eq!(
            metal_kernel_name("arg_test", &template, &inputs, &[DType::F32, DType::I32]),
            "custom_kernel_arg_test__1_3_float16_t_float_int32_tc_bfloat16_tc_floats_float_int32_t"
        );
        assert_eq!(render_template_args(&template), "<1, 3, float16_t>");
    }

    #[test]
    fn negative_int_template_stays_an_identifier() {
        let template = vec![("N".into(), TemplateArg::Int(-4))];
        let name = metal_kernel_name("k", &template, &[], &[DType::F32]);
        assert_eq!(name, "custom_kernel_k___4_float");
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }
}
