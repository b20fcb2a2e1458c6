//! Rust errors as the Python exceptions of `lease_lock._errors`.
//!
//! The classes are written in Python (so `AcquireTimeout` can also be a
//! `TimeoutError`, and `ConfigError` a `ValueError`, as Python users catch
//! them); this module picks the class for each error kind of the Rust client
//! and fills in its attributes. The message is the error's whole chain, one
//! layer after another, since Python code cannot walk the Rust sources.

use std::error::Error as StdError;

use lock_core::{FenceRefused, LockError, StoreError, StoreErrorKind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

use crate::classes;
use crate::values::lost_reason;

/// `Display` of `error` and of each of its sources, joined by ": ".
pub(crate) fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(next) = source {
        let line = next.to_string();
        // Some layers repeat their source's text; say each thing once.
        if !text.ends_with(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = next.source();
    }
    text
}

/// An exception of class `name` from `lease_lock._errors`, with `message`,
/// `retryable` and the attributes in `fields`.
fn raise(
    py: Python<'_>,
    name: &str,
    message: String,
    retryable: bool,
    fields: &[(&str, Py<PyAny>)],
) -> PyErr {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let mut fields: Vec<_> = fields
        .iter()
        .map(|(field, value)| (*field, value.clone_ref(py)))
        .collect();
    fields.push(("retryable", object(py, retryable)));
    let made = PyTuple::new(py, [message]).and_then(|args| {
        classes::construct(py, &MODULE, "lease_lock._errors", name, args, &fields)
    });
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(error) => error,
    }
}

/// `classes::value` for the fields of an exception: the values are strings,
/// numbers and `None`, whose conversion cannot fail.
fn object<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> Py<PyAny> {
    classes::value(py, value).unwrap_or_else(|_| py.None())
}

/// The exception for an error of the lock client.
pub(crate) fn lock_error(py: Python<'_>, error: LockError) -> PyErr {
    let message = chain(&error);
    let retryable = error.is_retryable();
    match &error {
        LockError::AcquireTimeout {
            key,
            holder,
            waited,
        } => raise(
            py,
            "AcquireTimeout",
            message,
            retryable,
            &[
                ("key", object(py, key.partition())),
                ("sort_key", object(py, key.sort())),
                ("holder", object(py, holder.as_deref())),
                ("waited", object(py, waited.as_secs_f64())),
            ],
        ),
        LockError::NotOwned { key, owner } => raise(
            py,
            "NotOwned",
            message,
            retryable,
            &[
                ("key", object(py, key.partition())),
                ("sort_key", object(py, key.sort())),
                ("owner", object(py, owner.as_deref())),
            ],
        ),
        LockError::Lost { key, reason } => {
            let reason = match lost_reason(py, reason) {
                Ok(reason) => reason,
                Err(error) => return error,
            };
            raise(
                py,
                "LockLost",
                message,
                retryable,
                &[
                    ("key", object(py, key.partition())),
                    ("sort_key", object(py, key.sort())),
                    ("reason", reason),
                ],
            )
        }
        LockError::AlreadyHeld { key } => raise(
            py,
            "AlreadyHeld",
            message,
            retryable,
            &[
                ("key", object(py, key.partition())),
                ("sort_key", object(py, key.sort())),
            ],
        ),
        LockError::NotFound { key } => raise(
            py,
            "LockNotFound",
            message,
            retryable,
            &[
                ("key", object(py, key.partition())),
                ("sort_key", object(py, key.sort())),
            ],
        ),
        LockError::InvalidConfig(_) => raise(py, "ConfigError", message, retryable, &[]),
        LockError::InvalidInput { .. }
        | LockError::PermitsMismatch { .. }
        | LockError::ReadersMismatch { .. }
        | LockError::TooManyReaders { .. } => raise(py, "InvalidInput", message, retryable, &[]),
        LockError::Store { source, .. } | LockError::List { source, .. } => {
            store_error_with(py, source, message, retryable)
        }
        LockError::Shutdown => raise(py, "ClientClosed", message, retryable, &[]),
        _ => raise(py, "LockError", message, retryable, &[]),
    }
}

/// The exception for a fence a resource refused (or bad input to a fenced
/// write): `StaleFence`, `OtherLockFence` or `InvalidInput`.
pub(crate) fn fence_refused(py: Python<'_>, refused: &FenceRefused) -> PyErr {
    let message = refused.to_string();
    match refused {
        FenceRefused::Stale {
            resource,
            presented,
            highest,
        } => raise(
            py,
            "StaleFence",
            message,
            false,
            &[
                ("resource", object(py, resource.as_str())),
                ("presented", object(py, presented.get())),
                ("highest", object(py, highest.get())),
            ],
        ),
        FenceRefused::OtherLock {
            resource,
            fenced_by,
            presented_by,
        } => raise(
            py,
            "OtherLockFence",
            message,
            false,
            &[
                ("resource", object(py, resource.as_str())),
                ("fenced_by", object(py, fenced_by.as_str())),
                ("presented_by", object(py, presented_by.as_str())),
            ],
        ),
        FenceRefused::InvalidInput { .. } => raise(py, "InvalidInput", message, false, &[]),
        _ => raise(py, "FenceRefused", message, false, &[]),
    }
}

/// A store's failure during a fenced write or read: `StoreError`, its kind
/// `other` (the object store's own errors carry no lock-store kind).
pub(crate) fn fenced_store_error(
    py: Python<'_>,
    error: &(dyn StdError + 'static),
    retryable: bool,
) -> PyErr {
    raise(
        py,
        "StoreError",
        chain(error),
        retryable,
        &[("kind", object(py, "other"))],
    )
}

fn store_error_with(
    py: Python<'_>,
    source: &StoreError,
    message: String,
    retryable: bool,
) -> PyErr {
    raise(
        py,
        "StoreError",
        message,
        retryable,
        &[("kind", object(py, kind_name(source.kind())))],
    )
}

/// A store's kind of failure as the `kind` attribute of `StoreError`.
fn kind_name(kind: StoreErrorKind) -> &'static str {
    match kind {
        StoreErrorKind::Throttled => "throttled",
        StoreErrorKind::Unavailable => "unavailable",
        StoreErrorKind::Ambiguous => "ambiguous",
        StoreErrorKind::NotFound => "not_found",
        StoreErrorKind::Invalid => "invalid",
        StoreErrorKind::Unauthorized => "unauthorized",
        _ => "other",
    }
}

/// A store that could not be built, or a table or schema that could not be
/// created or validated: `StoreSetupError`.
pub(crate) fn setup_error(py: Python<'_>, error: &(dyn StdError + 'static)) -> PyErr {
    raise(py, "StoreSetupError", chain(error), false, &[])
}

/// Input the Python layer refused before calling the client: `InvalidInput`
/// (a `ValueError`).
pub(crate) fn invalid_input(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "InvalidInput", message.into(), false, &[])
}

/// A client, store or lock used in a child of `fork()`: `ForkedError`.
pub(crate) fn forked(py: Python<'_>, message: String) -> PyErr {
    raise(py, "ForkedError", message, false, &[])
}

/// The runtime itself failed: not the user's input, so a `RuntimeError`.
pub(crate) fn runtime_failed(message: impl Into<String>) -> PyErr {
    PyRuntimeError::new_err(message.into())
}

/// The one rule of every `__exit__` that lets a lock go (a `Lock`'s release,
/// an `Election`'s resignation): when the block raised, a failure of
/// `leaving` is logged with its traceback to the `lease_lock` logger and the
/// block's exception goes on; otherwise the failure is raised. Never
/// swallows the block's exception (returns `false`).
pub(crate) fn exit_rule(
    py: Python<'_>,
    block_raised: bool,
    leaving: PyResult<Py<PyAny>>,
    what: &str,
) -> PyResult<bool> {
    match leaving {
        Ok(_) => Ok(false),
        Err(error) if !block_raised => Err(error),
        Err(error) => {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("exc_info", error.value(py))?;
            py.import("logging")?
                .call_method1("getLogger", ("lease_lock",))?
                .call_method(
                    "warning",
                    ("%s after an exception in its block failed", what),
                    Some(&kwargs),
                )?;
            Ok(false)
        }
    }
}

/// `None` for a call that succeeded with nothing to return, the exception
/// for one that failed (a release, a resign).
pub(crate) fn none_or_raise(py: Python<'_>, result: Result<(), LockError>) -> PyResult<Py<PyAny>> {
    result
        .map(|()| py.None())
        .map_err(|error| lock_error(py, error))
}
