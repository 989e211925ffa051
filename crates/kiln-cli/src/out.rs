//! Printing for the command line. `println!` panics when its stream is closed, as it is when a
//! reader stops early (`kiln translate SPEC | head`); here a closed stream ends the program
//! quietly with success (the reader took what it wanted), and any other write error ends it
//! with a message on stderr and a failure status.

use std::fmt;
use std::io::{self, Write};

/// Writes `args` to stdout (see the module documentation for errors).
pub fn stdout(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        write_failed("stdout", &e);
    }
}

/// Writes `args` to stderr (see the module documentation for errors).
pub fn stderr(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    if let Err(e) = err.write_fmt(args) {
        write_failed("stderr", &e);
    }
}

fn write_failed(stream: &str, e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    // Stderr may be the stream that failed; the exit status still tells.
    let _ = writeln!(io::stderr(), "error: writing to {stream}: {e}");
    std::process::exit(1);
}

/// `print!` through [`stdout`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::stdout(format_args!($($arg)*)) };
}

/// `println!` through [`stdout`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` through [`stderr`].
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {errln, out, outln};
