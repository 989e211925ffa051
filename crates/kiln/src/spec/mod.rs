//! Kernel spec files.
