//! Host arrays from typed Rust slices: the dtype follows the element type, values round-trip
//! exactly, and a wrong count is reported in the unit the caller passed.

use kiln::{bf16, f16, Array, DType, Element, Error};

/// A small xorshift generator, so the inputs differ from run to run of the constants below only
/// by seed and are never all zeros.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn round_trip<T: Element + PartialEq + std::fmt::Debug>(dtype: DType, values: Vec<T>) {
    let a = Array::from_slice(&[2, values.len() / 2], &values).unwrap();
    assert_eq!(a.dtype(), dtype);
    assert_eq!(a.shape(), &[2, values.len() / 2]);
    assert_eq!(a.to_vec::<T>().unwrap(), values, "{dtype} values come back unchanged");
    let mut bytes = Vec::new();
    for &v in &values {
        v.write_le(&mut bytes);
    }
    assert_eq!(a.to_contiguous_bytes().unwrap(), bytes, "{dtype} is stored little-endian, row-major");
}

#[test]
fn from_slice_maps_each_element_type_to_its_dtype() {
    let mut rng = Rng(0x6b69_6c6e_2026);
    let n = 16;
    round_trip(DType::F32, (0..n).map(|_| f32::from_bits(rng.next() as u32 & 0x7f7f_ffff)).collect());
    round_trip(DType::F16, (0..n).map(|_| f16::from_bits(rng.next() as u16 & 0x7bff)).collect());
    round_trip(DType::BF16, (0..n).map(|_| bf16::from_bits(rng.next() as u16 & 0x7f7f)).collect());
    round_trip(DType::I32, (0..n).map(|_| rng.next() as i32).collect());
    round_trip(DType::I64, (0..n).map(|_| rng.next() as i64).collect());
    round_trip(DType::U8, (0..n).map(|_| rng.next() as u8).collect());
    round_trip(DType::U16, (0..n).map(|_| rng.next() as u16).collect());
    round_trip(DType::U32, (0..n).map(|_| rng.next() as u32).collect());
    round_trip(DType::U64, (0..n).map(|_| rng.next()).collect());
    round_trip(DType::I8, (0..n).map(|_| rng.next() as i8).collect());
    round_trip(DType::I16, (0..n).map(|_| rng.next() as i16).collect());
    round_trip(DType::Bool, (0..n).map(|_| rng.next() & 1 == 1).collect());
}

fn shape_message(e: Error) -> String {
    match e {
        Error::ShapeMismatch { op, msg } => {
            assert_eq!(op, "array");
            msg
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}

#[test]
fn a_wrong_count_is_reported_in_elements_or_bytes_as_given() {
    let msg = shape_message(Array::from_slice(&[3], &[1.0f32, 2.0, 3.0, 4.0]).unwrap_err());
    assert_eq!(msg, "4 elements given for shape [3] (3 expected)");
    let msg = shape_message(Array::from_vec(&[2, 2], vec![1u8, 2, 3]).unwrap_err());
    assert_eq!(msg, "3 elements given for shape [2, 2] (4 expected)");
    let msg = shape_message(Array::from_f64(DType::BF16, &[3], &[0.5; 4]).unwrap_err());
    assert_eq!(msg, "4 elements given for shape [3] (3 expected)");
    // Bytes only where bytes were given.
    let msg = shape_message(Array::from_bytes(DType::F32, &[3], &[0u8; 16]).unwrap_err());
    assert_eq!(msg, "16 bytes given for shape [3] of float32 (12 bytes expected)");
}

#[test]
fn f64_data_converts_once_to_the_dtype_named() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let values: Vec<f64> = (0..12).map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0).collect();
    let a = Array::from_f64(DType::F32, &[3, 4], &values).unwrap();
    let want: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    assert_eq!(a.to_vec::<f32>().unwrap(), want);
    let back = a.to_f64_vec().unwrap();
    assert!(back.iter().zip(&values).all(|(b, v)| (b - v).abs() <= v.abs() * f64::from(f32::EPSILON)));
}
