//! What MLX detects in a kernel body by plain substring search over `source` (never `header`,
//! comments included): the attribute parameters and the `X_shape` / `X_strides` / `X_ndim`
//! parameters of each input.

/// The Metal thread-position attributes MLX can add to a generated signature, in MLX's fixed
/// order, with their parameter types.
pub const ATTRIBUTES: [(&str, &str); 20] = [
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
];

/// Which shape-information parameters a body asks for, for one input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShapeInfo {
    /// The body uses `X_shape`.
    pub shape: bool,
    /// The body uses `X_strides`.
    pub strides: bool,
    /// The body uses `X_ndim`.
    pub ndim: bool,
}

impl ShapeInfo {
    /// True when any of the three is used.
    pub fn any(self) -> bool {
        self.shape || self.strides || self.ndim
    }
}

/// The attributes `source` mentions, as (name, type) in table order.
pub fn detect_attributes(source: &str) -> Vec<(&'static str, &'static str)> {
    ATTRIBUTES.iter().copied().filter(|(name, _)| source.contains(name)).collect()
}

/// The shape information `source` mentions for input `name`.
pub fn detect_shape_info(source: &str, name: &str) -> ShapeInfo {
    ShapeInfo {
        shape: source.contains(&format!("{name}_shape")),
        strides: source.contains(&format!("{name}_strides")),
        ndim: source.contains(&format!("{name}_ndim")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_rule_turns_on_overlapping_attributes() {
        let found = detect_attributes("uint3 t = dispatch_threads_per_threadgroup;");
        let names: Vec<_> = found.iter().map(|a| a.0).collect();
        assert_eq!(names, vec!["dispatch_threads_per_threadgroup", "threads_per_threadgroup"]);
        // Comments count.
        assert_eq!(detect_attributes("// grid_size\n").len(), 1);
    }

    #[test]
    fn shape_info_matches_substrings_anywhere() {
        let s = "int n = data_shape[0]; // a_ndim";
        let a = detect_shape_info(s, "a");
        assert_eq!(a, ShapeInfo { shape: true, strides: false, ndim: true });
        assert!(!detect_shape_info(s, "b").any());
    }
}
