//! [`server_from_env`]: where the tests find the real servers `./scripts/test`
//! starts, and the one way they say so when it is missing.

/// The address of a test server from the environment variable `var`, which
/// `./scripts/test` sets after starting the server.
///
/// Without it the calling test fails, saying how to run it, unless `skip` is set
/// to `1`: then `None`, and the skip is printed (a test that did not run must
/// never look like one that passed silently).
///
/// # Panics
///
/// When `var` is unset or empty and `skip` is not `1`.
pub fn server_from_env(var: &str, skip: &str, server: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(address) if !address.is_empty() => Some(address),
        _ if std::env::var(skip).as_deref() == Ok("1") => {
            eprintln!("SKIPPED: {skip}=1 and no {var}; this {server} test did not run");
            None
        }
        _ => panic!(
            "{var} is not set. The {server} tests run against a real server: \
             run ./scripts/test, which installs and starts it and sets the variable \
             (or set {skip}=1 to skip them explicitly)."
        ),
    }
}
