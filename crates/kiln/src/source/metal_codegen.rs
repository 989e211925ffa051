//! Metal source for a body-only kernel, byte-identical to what MLX 0.32.4's `metal_kernel`
//! generates: header, template line, signature (inputs with their shape information, outputs,
//! detected attributes), body, explicit `[[host_name]]` instantiation.
//!
//! One deliberate difference: MLX misplaces `) {` when several outputs follow shape parameters
//! and no attribute is used; here parameters are always joined with commas.

use super::mangle::{render_template_args, TemplateArg, TemplateName};
use super::scan::ShapeInfo;
use crate::dtype::DType;

/// One input as the signature sees it.
#[derive(Clone, Copy, Debug)]
pub struct SignatureInput<'a> {
    /// The input's name in the kernel.
    pub name: &'a str,
    /// The input's element type.
    pub dtype: DType,
    /// Number of axes.
    pub ndim: usize,
    /// Number of elements.
    pub size: usize,
    /// Which shape-information parameters the body uses for it.
    pub shape_info: ShapeInfo,
}

impl SignatureInput<'_> {
    /// MLX binds inputs of fewer than 8 elements in `constant` space.
    pub fn address_space(&self) -> &'static str {
        if self.size < 8 {
            "constant"
        } else {
            "device"
        }
    }

    /// Shape information parameters exist only for inputs with at least one axis.
    pub fn passes_shape_info(&self) -> ShapeInfo {
        if self.ndim == 0 {
            ShapeInfo::default()
        } else {
            self.shape_info
        }
    }
}

/// Everything the generated text depends on.
#[derive(Clone, Debug)]
pub struct MetalSourceParts<'a> {
    /// The kernel's name.
    pub kernel_name: &'a str,
    /// Source placed before the kernel (helper functions, includes).
    pub header: &'a str,
    /// The kernel body.
    pub body: &'a str,
    /// Template parameters and their arguments.
    pub template: &'a [(TemplateName, TemplateArg)],
    /// The inputs, in signature order.
    pub inputs: &'a [SignatureInput<'a>],
    /// The outputs' names and element types.
    pub outputs: &'a [(&'a str, DType)],
    /// Whether outputs are bound as atomic types.
    pub atomic_outputs: bool,
    /// Thread-position attributes the body uses: (attribute name, parameter type).
    pub attributes: &'a [(&'static str, &'static str)],
}

/// The generated source (MLX's `source_`: without the utils preamble).
pub fn generate(parts: &MetalSourceParts<'_>) -> String {
    let mut params: Vec<String> = Vec::new();
    let mut buffer = 0usize;
    let mut next = || {
        buffer += 1;
        buffer - 1
    };
    for input in parts.inputs {
        let space = input.address_space();
        let ty = input.dtype.metal_type();
        let sigil = if input.ndim == 0 { '&' } else { '*' };
        params.push(format!("  const {space} {ty}{sigil} {} [[buffer({})]]", input.name, next()));
        let info = input.passes_shape_info();
        if info.shape {
            params.push(format!("  const constant int* {}_shape [[buffer({})]]", input.name, next()));
        }
        if info.strides {
            params.push(format!("  const constant int64_t* {}_strides [[buffer({})]]", input.name, next()));
        }
        if info.ndim {
            params.push(format!("  const constant int& {}_ndim [[buffer({})]]", input.name, next()));
        }
    }
    for (name, dtype) in parts.outputs {
        let ty = dtype.metal_type();
        let ty = if parts.atomic_outputs { format!("atomic<{ty}>") } else { ty.to_string() };
        params.push(format!("  device {ty}* {name} [[buffer({})]]", next()));
    }
    for (attr, ty) in parts.attributes {
        params.push(format!("  {ty} {attr} [[{attr}]]"));
    }

    let name = parts.kernel_name;
    let mut out = String::with_capacity(parts.header.len() + parts.body.len() + 512);
    out.push_str(parts.header);
    if !parts.template.is_empty() {
        let list: Vec<String> = parts.template.iter().map(|(n, a)| format!("{} {}", a.param_keyword(), n)).collect();
        out.push_str(&format!("template <{}>\n", list.join(", ")));
    }
    out.push_str(&format!("[[kernel]] void {name}(\n"));
    out.push_str(&params.join(",\n"));
    out.push_str(") {\n");
    out.push_str(parts.body);
    out.push_str("\n}\n");
    if !parts.template.is_empty() {
        let args = render_template_args(parts.template);
        out.push_str(&format!(
            "\ntemplate [[host_name(\"{name}\")]] [[kernel]] decltype({name}{args}) {name}{args};\n"
        ));
    }
    out
}

/// Number of buffer slots the signature binds (Metal allows 31).
pub fn buffer_count(inputs: &[SignatureInput<'_>], n_outputs: usize) -> usize {
    inputs
        .iter()
        .map(|i| {
            let s = i.passes_shape_info();
            1 + s.shape as usize + s.strides as usize + s.ndim as usize
        })
        .sum::<usize>()
        + n_outputs
}
