//! [`server_from_env`]: where the tests find the real servers `./scripts/test`
//! starts, and the one way they say so when it is missing; [`moto_bucket`]:
//! a bucket on moto's S3 for the object-store tests.

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

/// Make `bucket` on the moto server at `endpoint` (`http://host:port`) if it
/// is not there. moto takes an unsigned `PUT /bucket`; a real S3 endpoint
/// would refuse it.
///
/// # Errors
///
/// When the server cannot be reached or refuses the bucket; the error carries
/// its reply.
pub fn moto_bucket(endpoint: &str, bucket: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(host)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    if reply.starts_with("HTTP/1.1 200") || reply.contains("BucketAlreadyOwnedByYou") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "making bucket {bucket} at {endpoint}: {reply}"
        )))
    }
}
