//! `--metrics`: the lock library's figures, collected in this process and
//! printed to stderr as one line of JSON when lockctl exits.

use lock_core::metrics::{Collector, Figure, FigureValue};
use serde_json::{Map, Value, json};

/// Install a collector as the process's recorder (nothing else installs one).
pub fn collect() -> Collector {
    let collector = Collector::new();
    if collector.install().is_ok() {
        lock_core::metrics::describe();
    }
    collector
}

/// Print what `collector` holds: `{"metrics": [{"name", "labels", "type",
/// "value"} ...]}`, a histogram's value being its count, sum, min and max.
pub fn print(collector: &Collector) {
    let figures: Vec<Value> = collector.snapshot().iter().map(figure).collect();
    eprintln!("{}", json!({ "metrics": figures }));
}

fn figure(figure: &Figure) -> Value {
    let labels: Map<String, Value> = figure
        .labels
        .iter()
        .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
        .collect();
    let (kind, value) = match figure.value {
        FigureValue::Counter(count) => ("counter", json!(count)),
        FigureValue::Gauge(value) => ("gauge", json!(value)),
        FigureValue::Histogram(summary) => (
            "histogram",
            json!({
                "count": summary.count,
                "sum": summary.sum,
                "min": summary.min,
                "max": summary.max,
            }),
        ),
        // A kind added later prints as its debug form rather than not at all.
        other => ("other", json!(format!("{other:?}"))),
    };
    json!({ "name": figure.name, "labels": labels, "type": kind, "value": value })
}
