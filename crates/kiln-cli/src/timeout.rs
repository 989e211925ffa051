//! The `--timeout` flag of `kiln run` and `kiln check`: how long a spec file's kernel may run.

use std::time::Duration;

/// How long a kernel runs when neither `--timeout` nor the spec's `timeout` key says.
const DEFAULT_SECONDS: f64 = 60.0;

/// The limit that replaces the spec's `timeout` key: the flag when given, else the default when
/// the spec gives none (`None`: keep the spec's).
/// `command` names the subcommand in errors.
pub fn spec_limit(command: &str, flag: Option<f64>, key: Option<Duration>) -> kiln::Result<Option<Duration>> {
    match (flag, key) {
        (Some(seconds), _) => seconds_arg(command, seconds).map(Some),
        (None, None) => seconds_arg(command, DEFAULT_SECONDS).map(Some),
        (None, Some(_)) => Ok(None),
    }
}

fn seconds_arg(command: &str, seconds: f64) -> kiln::Result<Duration> {
    let invalid =
        || kiln::Error::invalid(command, format!("--timeout {seconds}: give a number of seconds >= 0 (0: no limit)"));
    if seconds.is_nan() || seconds < 0.0 {
        return Err(invalid());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_flag_overrides_the_key_and_the_default_applies_only_without_both() {
        let secs = Duration::from_secs_f64;
        assert_eq!(spec_limit("run", None, None).unwrap(), Some(secs(60.0)));
        assert_eq!(spec_limit("run", None, Some(secs(5.0))).unwrap(), None);
        assert_eq!(spec_limit("run", Some(0.25), Some(secs(5.0))).unwrap(), Some(secs(0.25)));
        assert_eq!(spec_limit("run", Some(0.0), None).unwrap(), Some(Duration::ZERO));
        assert!(spec_limit("run", Some(f64::NAN), None).is_err());
        assert!(spec_limit("run", Some(-1.0), None).is_err());
    }
}
