//! `lease_lock._native`: the Rust core of the Python package `lease_lock`.
//!
//! The Python package (`lock-python/python/lease_lock`) is what users import;
//! this extension module runs the lock client of `lock-core` on a tokio
//! runtime of its own, so heartbeats go on while Python threads hold the GIL.
//! The package's Python layer adds keyword arguments, `timedelta`s, the
//! `with` and `async with` forms, the callback thread and the exceptions.
//! Built and installed with `pip install ./lock-python` (maturin).
//!
//! ```python
//! import lease_lock
//!
//! client = lease_lock.LockClient(lease_lock.MemoryStore(), owner="worker-1")
//! with client.lock("nightly-report", wait=30) as lock:
//!     print("fence", lock.fence)
//! client.close()
//! ```
//!
//! The modules, in the order a call goes through them: `convert` checks
//! arguments, `client` and `stores` make the Rust calls, `runtime` runs
//! them (blocking, woken by signals through `signal_wake`, or as asyncio
//! futures), `lock`, `election`, `semaphore` and `rw` wrap what they return (with
//! the waits on a lease's signals they share in `signals`),
//! `errors` turns failures into exceptions (`classes` makes instances of
//! the package's Python classes for both), `events` carries
//! callbacks and log records back to a Python thread, and `metrics` hands
//! out the figures the clients of the process recorded.

mod classes;
mod client;
mod convert;
mod credentials;
mod election;
mod errors;
mod events;
mod fencing;
mod lock;
mod metrics;
mod runtime;
mod rw;
mod semaphore;
mod signal_wake;
mod signals;
mod stores;
mod values;
mod work;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    events::install_logging();
    metrics::install();
    module.add_class::<client::Client>()?;
    module.add_class::<lock::Lock>()?;
    module.add_class::<election::Election>()?;
    module.add_class::<election::Leadership>()?;
    module.add_class::<semaphore::Semaphore>()?;
    module.add_class::<rw::RwLock>()?;
    module.add_class::<stores::MemoryStore>()?;
    module.add_class::<stores::DynamoDBStore>()?;
    module.add_class::<stores::PostgresStore>()?;
    module.add_class::<stores::BucketStore>()?;
    module.add_class::<stores::EtcdStore>()?;
    module.add_class::<stores::RedisStore>()?;
    module.add_class::<work::Work>()?;
    module.add_function(wrap_pyfunction!(events::next_events, module)?)?;
    module.add_function(wrap_pyfunction!(events::set_log_level, module)?)?;
    module.add_function(wrap_pyfunction!(events::wake_events, module)?)?;
    module.add_function(wrap_pyfunction!(events::after_fork_in_child, module)?)?;
    module.add_function(wrap_pyfunction!(metrics::metrics, module)?)?;
    module.add_function(wrap_pyfunction!(runtime::_panicking_call, module)?)?;
    module.add_function(wrap_pyfunction!(fencing::_fence_of, module)?)?;
    module.add_function(wrap_pyfunction!(fencing::_fence_key, module)?)?;
    module.add_function(wrap_pyfunction!(
        fencing::_postgres_fence_arguments,
        module
    )?)?;
    module.add_function(wrap_pyfunction!(fencing::_dynamodb_fence, module)?)?;
    module.add_function(wrap_pyfunction!(fencing::_check_fence, module)?)?;
    Ok(())
}
