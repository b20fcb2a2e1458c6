//! A TCP proxy that adds round-trip time in front of a server, for
//! `./scripts/bench-vs-python --distance`: every reply is held back by the given
//! delay (once per reply; requests go through at once), as on a link to a
//! DynamoDB endpoint that far away. Connections are set up locally, as kept-alive
//! connections to DynamoDB would be.
//!
//! ```text
//! delay_proxy UPSTREAM_URL DELAY_MS
//! ```
//!
//! Prints the proxy's URL on the first line of its output, then serves until it
//! is killed.

use std::io::Write;
use std::time::Duration;

use lock_bench::BenchError;
use lock_testkit::proxy::{FaultProxy, ProxyMode};

fn main() -> Result<(), BenchError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [upstream, delay_ms] = args.as_slice() else {
        return Err("usage: delay_proxy UPSTREAM_URL DELAY_MS".into());
    };
    let upstream = upstream
        .strip_prefix("http://")
        .unwrap_or(upstream)
        .trim_end_matches('/');
    let delay = Duration::try_from_secs_f64(delay_ms.parse::<f64>()? / 1e3)?;
    let proxy = FaultProxy::start(upstream)?;
    if !delay.is_zero() {
        proxy.set(ProxyMode::DelayReplies(delay));
    }
    let mut out = std::io::stdout();
    writeln!(out, "{}", proxy.url())?;
    out.flush()?;
    // The proxy serves on its own thread until the process is killed.
    loop {
        std::thread::park();
    }
}
