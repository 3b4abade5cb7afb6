//! Skipping a test whose kernel feature is missing, or failing it in strict mode.

pub fn strict() -> bool {
    std::env::var("CAPSULE_TEST_STRICT").map(|v| v == "1").unwrap_or(false)
}

/// Reports a skipped test (or fails it under `CAPSULE_TEST_STRICT=1`).
pub fn skip(test: &str, reason: &str) {
    if strict() {
        panic!("{test}: required feature missing (CAPSULE_TEST_STRICT=1): {reason}");
    }
    eprintln!("SKIP {test}: {reason}");
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
