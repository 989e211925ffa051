//! The instruction offsets of a checked library's findings, resolved to file and line of the
//! generated unit with `addr2line` over the library's line tables (one process for all of them
//! where the output can be split, else one per offset).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::Site;
use crate::backend::disk_cache;

/// Resolves instruction offsets in the library `image` to their inline chains with `addr2line`;
/// offsets it cannot resolve (no `addr2line`, no line tables) and 0 are left out.
pub(super) fn resolve(image: &[u8], pcs: impl IntoIterator<Item = u32>) -> HashMap<u32, Site> {
    let mut pcs: Vec<u32> = pcs.into_iter().filter(|&p| p != 0).collect();
    pcs.sort_unstable();
    pcs.dedup();
    let mut out = HashMap::new();
    if pcs.is_empty() {
        return out;
    }
    let path = disk_cache::private_name(&std::env::temp_dir(), "kiln-check-lines", "so");
    if std::fs::write(&path, image).is_err() {
        return out;
    }
    // A return address names the instruction after the call: one byte back lies in the call.
    let args: Vec<String> = pcs.iter().map(|p| format!("{:#x}", p.saturating_sub(1))).collect();
    let result = Command::new("addr2line").arg("-i").arg("-e").arg(&path).args(&args).output();
    let _ = std::fs::remove_file(&path);
    let Ok(result) = result else { return out };
    // With -i, each address gives its chain followed by nothing that separates it from the next;
    // resolving addresses one by one would cost a process each, so an address's chain ends where
    // the next address's innermost frame begins: ask again with a marker address in between.
    let text = String::from_utf8_lossy(&result.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() == pcs.len() {
        for (pc, line) in pcs.iter().zip(&lines) {
            out.insert(*pc, parse_frames(&[line]));
        }
        return out;
    }
    for pc in &pcs {
        let one = Command::new("addr2line")
            .arg("-i")
            .arg("-e")
            .arg(write_again(&path, image).as_deref().unwrap_or(Path::new("")))
            .arg(format!("{:#x}", pc.saturating_sub(1)))
            .output();
        if let Ok(one) = one {
            let text = String::from_utf8_lossy(&one.stdout).into_owned();
            let frames: Vec<&str> = text.lines().collect();
            out.insert(*pc, parse_frames(&frames));
        }
    }
    let _ = std::fs::remove_file(&path);
    out
}

fn write_again(path: &Path, image: &[u8]) -> Option<std::path::PathBuf> {
    if !path.exists() {
        std::fs::write(path, image).ok()?;
    }
    Some(path.to_path_buf())
}

/// `file:line` lines (`addr2line` output) to (file, line) pairs; unknown ones are dropped.
fn parse_frames(lines: &[&str]) -> Site {
    lines
        .iter()
        .filter_map(|l| {
            let l = l.split(" (discriminator").next()?;
            let (file, line) = l.rsplit_once(':')?;
            Some((file.to_string(), line.trim().parse().ok()?))
        })
        .collect()
}
