//! The metrics of every client of the process (see lock-core's `metrics`),
//! kept by a collector installed when the module is imported (before any
//! client is built, so every client records into it) and read by
//! `lease_lock.metrics()`.

use std::sync::OnceLock;

use lock_core::metrics::{Collector, FigureValue};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

static COLLECTOR: OnceLock<Collector> = OnceLock::new();

/// Install the process's collector, once (a second import of the module, in
/// a sub-interpreter for instance, finds it installed).
pub fn install() {
    COLLECTOR.get_or_init(|| {
        let collector = Collector::new();
        if collector.install().is_ok() {
            lock_core::metrics::describe();
        }
        collector
    });
}

/// Every series recorded so far: a list of dicts with `name`, `labels` (a
/// dict), `type` (`"counter"`, `"gauge"` or `"histogram"`) and `value` (a
/// number, or for a histogram a dict of `count`, `sum`, `min`, `max`).
#[pyfunction]
pub fn metrics(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let figures = COLLECTOR.get().map(Collector::snapshot).unwrap_or_default();
    let list = PyList::empty(py);
    for figure in figures {
        let item = PyDict::new(py);
        item.set_item("name", &figure.name)?;
        let labels = PyDict::new(py);
        for (name, value) in &figure.labels {
            labels.set_item(name, value)?;
        }
        item.set_item("labels", labels)?;
        match figure.value {
            FigureValue::Counter(count) => {
                item.set_item("type", "counter")?;
                item.set_item("value", count)?;
            }
            FigureValue::Gauge(value) => {
                item.set_item("type", "gauge")?;
                item.set_item("value", value)?;
            }
            FigureValue::Histogram(summary) => {
                item.set_item("type", "histogram")?;
                let value = PyDict::new(py);
                value.set_item("count", summary.count)?;
                value.set_item("sum", summary.sum)?;
                value.set_item("min", summary.min)?;
                value.set_item("max", summary.max)?;
                item.set_item("value", value)?;
            }
            // A kind lock-core adds later is left out until this knows it.
            _ => continue,
        }
        list.append(item)?;
    }
    Ok(list)
}
