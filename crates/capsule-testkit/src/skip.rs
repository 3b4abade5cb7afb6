//! Skipping a test whose kernel feature is missing, or failing it in strict mode.

pub fn strict() -> bool {
    std::env::var("CAPSULE_TEST_STRICT").map(|v| v == "1").unwrap_or(false)
}

/// Reports a skipped test (or fails it under `CAPSULE_TEST_STRICT=1`).
pub fn skip(test: &str, reason: &str) {
    if strict() {
        panic!("{test}: required feature missing (CAPSULE_TEST_STRICT=1): {reason}");
    }
    report_skip(test, reason);
}

/// The variable naming the file every skip is appended to as `TEST: REASON`
/// (scripts/test.sh prints them in its summary line: libtest keeps a
/// passing test's stderr to itself).
pub const SKIP_LOG_ENV: &str = "CAPSULE_TEST_SKIP_LOG";

/// Prints `SKIP test: reason` and appends it to `$CAPSULE_TEST_SKIP_LOG`.
pub fn report_skip(test: &str, reason: &str) {
    eprintln!("SKIP {test}: {reason}");
    let Some(log) = std::env::var_os(SKIP_LOG_ENV) else { return };
    let line = format!("{test}: {}\n", reason.replace('\n', " "));
    // One write of an O_APPEND file: parallel tests' lines stay whole.
    let appended = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&log)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
    if let Err(e) = appended {
        eprintln!("capsule-testkit: cannot append to {SKIP_LOG_ENV}={}: {e}", log.to_string_lossy());
    }
}

/// `require!(test_name, condition_result)`: returns from the test after
/// [`skip`] when the `Result<(), String>` is an error.
#[macro_export]
macro_rules! require {
    ($test:expr, $check:expr) => {
        if let Err(reason) = $check {
            $crate::skip($test, &reason);
            return;
        }
    };
}
