//! Helpers of the library's unit tests.

/// A directory path under the system's temporary directory, unique to this
/// process and call: the unit tests run side by side as threads of one
/// process, so a name made of the process id alone would be shared by two
/// tests with the same stem. What an earlier process of the same id left
/// there (a failed test keeps its files) is removed; the directory itself is
/// not created.
pub(crate) fn unique_temp_dir(stem: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("{stem}_{}_{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    path
}

/// `work` run in a rayon pool of `threads` threads: what a face or row loop
/// computes on that many threads (the parallel sums' bits are held to the
/// one-thread run's).
pub(crate) fn on_threads<R: Send>(threads: usize, work: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool for the test")
        .install(work)
}

/// Asserts that each `(text, expected)` of `cases` fails to parse as `T`
/// with an error that contains `expected`: the refusals of a settings
/// parser, checked by their message.
pub(crate) fn assert_parse_refused<T: std::str::FromStr>(cases: &[(&str, &str)])
where
    T::Err: std::fmt::Display,
{
    for (bad, expected) in cases {
        match bad.parse::<T>() {
            Ok(_) => panic!("{bad}: parsed, expected an error containing '{expected}'"),
            Err(err) => {
                let err = err.to_string();
                assert!(err.contains(expected), "{bad}: {err}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_calls_with_one_stem_get_two_directories() {
        let (a, b) = (
            unique_temp_dir("fvpoisson_unique"),
            unique_temp_dir("fvpoisson_unique"),
        );
        assert_ne!(a, b);
        assert!(a.starts_with(std::env::temp_dir()) && !a.exists());
    }

    #[test]
    #[should_panic(expected = "x: invalid digit")]
    fn a_refusal_with_another_message_fails() {
        assert_parse_refused::<u32>(&[("x", "invalid digit"), ("x", "overflow")]);
    }

    #[test]
    #[should_panic(expected = "7: parsed")]
    fn text_that_parses_fails() {
        assert_parse_refused::<u32>(&[("7", "invalid digit")]);
    }
}
