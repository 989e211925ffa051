//! Where the lines kernels log with Metal's `os_log` go.
//!
//! On the CPU emulator a launch's lines are printed to the process's standard error when the
//! launch ends, in the order of its threadgroups (and, within a group, the order the emulator
//! ran its threads), each tagged `[kernel tg(x,y,z) t(x,y,z)]`: the same text on every run.
//! [`capture`] collects them instead, for launches made from the calling thread. On CUDA,
//! device `printf` writes the same lines to standard output when the host synchronises; they
//! cannot be captured this way (their order between threads is the GPU's).

use std::cell::RefCell;
use std::io::Write;

thread_local! {
    /// The captures open on this thread, innermost last.
    static CAPTURES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` and returns its result with the text CPU kernels launched from this thread logged
/// while it ran (lines ending in `\n`), which then does not reach standard error.
///
/// ```no_run
/// # use kiln::{Array, DType, LaunchSpec, MetalKernel};
/// let kernel = MetalKernel::new("hello", &["x"], &["out"], r#"
///     uint i = thread_position_in_grid.x;
///     os_log_default.log("x[%u] = %f", i, x[i]);
///     out[i] = x[i];
/// "#)?;
/// let x = Array::from_f64(DType::F32, &[2], &[1.5, 2.5])?;
/// let spec = LaunchSpec::new([2, 1, 1], [2, 1, 1]).output(&[2], DType::F32);
/// let (out, text) = kiln::kernel_log::capture(|| kernel.call(&[(&x).into()], &spec));
/// assert_eq!(text, "[hello tg(0,0,0) t(0,0,0)] x[0] = 1.500000\n[hello tg(0,0,0) t(1,0,0)] x[1] = 2.500000\n");
/// # out?; Ok::<(), kiln::Error>(())
/// ```
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, String) {
    CAPTURES.with(|c| c.borrow_mut().push(String::new()));
    // Closes the capture even when `f` unwinds.
    struct Close;
    impl Drop for Close {
        fn drop(&mut self) {
            let _ = CAPTURES.try_with(|c| c.borrow_mut().pop());
        }
    }
    let close = Close;
    let result = f();
    let text = CAPTURES.with(|c| c.borrow_mut().last_mut().map(std::mem::take)).unwrap_or_default();
    drop(close);
    (result, text)
}

/// Delivers a launch's logged text: to the innermost capture of this thread, else to standard
/// error (one write, so lines of concurrent launches do not mix).
pub(crate) fn emit(text: &str) {
    if text.is_empty() {
        return;
    }
    let captured = CAPTURES.with(|c| match c.borrow_mut().last_mut() {
        Some(buffer) => {
            buffer.push_str(text);
            true
        }
        None => false,
    });
    if !captured {
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}
