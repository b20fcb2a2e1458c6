//! Instances of the package's own Python classes (the exceptions of
//! `_errors.py`, the values of `_types.py`), made from Rust.

use pyo3::BoundObject;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};

/// `module.name(*args, **fields)`, the module imported once into `cache`.
pub(crate) fn construct<'py>(
    py: Python<'py>,
    cache: &'static PyOnceLock<Py<PyModule>>,
    module: &str,
    name: &str,
    args: Bound<'py, PyTuple>,
    fields: &[(&str, Py<PyAny>)],
) -> PyResult<Bound<'py, PyAny>> {
    let module = cache.get_or_try_init(py, || py.import(module).map(Bound::unbind))?;
    let kwargs = PyDict::new(py);
    for (field, value) in fields {
        kwargs.set_item(*field, value)?;
    }
    module.bind(py).getattr(name)?.call(args, Some(&kwargs))
}

/// A Rust value as a Python object.
pub(crate) fn value<'py, T: IntoPyObject<'py>>(py: Python<'py>, value: T) -> PyResult<Py<PyAny>> {
    value
        .into_pyobject(py)
        .map(|bound| bound.into_any().unbind())
        .map_err(Into::into)
}
