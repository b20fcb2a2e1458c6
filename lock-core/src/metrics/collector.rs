//! An in-process recorder that keeps every figure for reading back: counters
//! and gauges as numbers, histograms as count, sum, minimum and maximum. What
//! `lockctl --metrics` prints at exit and `lease_lock.metrics()` returns.

use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_util::registry::{Registry, Storage};

/// A [`Recorder`] that keeps what the clients of this process emit, for
/// [`snapshot`](Self::snapshot). Install it (once per process) before
/// building clients:
///
/// ```
/// use lock_core::metrics::{Collector, ACQUIRES};
///
/// let collector = Collector::new();
/// collector.install().expect("no other recorder installed");
/// // ... build clients, acquire locks ...
/// let acquires: u64 = collector
///     .snapshot()
///     .iter()
///     .filter(|figure| figure.name == ACQUIRES)
///     .filter_map(|figure| figure.value.as_count())
///     .sum();
/// assert_eq!(acquires, 0);
/// ```
#[derive(Clone)]
pub struct Collector {
    registry: Arc<Registry<Key, SummaryStorage>>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").finish_non_exhaustive()
    }
}

impl Default for Collector {
    fn default() -> Self {
        Self {
            registry: Arc::new(Registry::new(SummaryStorage)),
        }
    }
}

/// One series: a metric's name, its labels and its value now.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Figure {
    /// The metric's name (see the [module docs](super)).
    pub name: String,
    /// Its labels, sorted by name.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: FigureValue,
}

/// What a [`Figure`] holds.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum FigureValue {
    /// A counter's total.
    Counter(u64),
    /// A gauge's value.
    Gauge(f64),
    /// A histogram's samples, summed up.
    Histogram(Summary),
}

impl FigureValue {
    /// A counter's total, `None` for another kind.
    pub fn as_count(&self) -> Option<u64> {
        match self {
            FigureValue::Counter(count) => Some(*count),
            _ => None,
        }
    }
}

/// The samples a histogram recorded: how many, their sum, the smallest and
/// the largest (both 0 with no samples).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Summary {
    /// How many samples.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

/// A histogram kept as its [`Summary`].
#[derive(Debug, Default)]
struct SummaryCell(Mutex<Summary>);

impl HistogramFn for SummaryCell {
    fn record(&self, value: f64) {
        let mut summary = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if summary.count == 0 {
            summary.min = value;
            summary.max = value;
        } else {
            summary.min = summary.min.min(value);
            summary.max = summary.max.max(value);
        }
        summary.count += 1;
        summary.sum += value;
    }
}

/// Counters and gauges as atomics, histograms as summaries.
#[derive(Debug, Default)]
struct SummaryStorage;

impl<K> Storage<K> for SummaryStorage {
    type Counter = Arc<metrics::atomics::AtomicU64>;
    type Gauge = Arc<metrics::atomics::AtomicU64>;
    type Histogram = Arc<SummaryCell>;

    fn counter(&self, _: &K) -> Self::Counter {
        Arc::new(metrics::atomics::AtomicU64::new(0))
    }

    fn gauge(&self, _: &K) -> Self::Gauge {
        Arc::new(metrics::atomics::AtomicU64::new(0))
    }

    fn histogram(&self, _: &K) -> Self::Histogram {
        Arc::new(SummaryCell::default())
    }
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Install this collector as the process's recorder (a clone of it: this
    /// one still reads what it records). Fails if a recorder is installed.
    pub fn install(&self) -> Result<(), metrics::SetRecorderError<Collector>> {
        metrics::set_global_recorder(self.clone())
    }

    /// Every series recorded so far, sorted by name and labels.
    pub fn snapshot(&self) -> Vec<Figure> {
        use std::sync::atomic::Ordering;
        let mut figures = Vec::new();
        let mut add = |key: &Key, value| {
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            labels.sort();
            figures.push(Figure {
                name: key.name().to_owned(),
                labels,
                value,
            });
        };
        for (key, counter) in self.registry.get_counter_handles() {
            add(&key, FigureValue::Counter(counter.load(Ordering::Acquire)));
        }
        for (key, gauge) in self.registry.get_gauge_handles() {
            let value = f64::from_bits(gauge.load(Ordering::Acquire));
            add(&key, FigureValue::Gauge(value));
        }
        for (key, histogram) in self.registry.get_histogram_handles() {
            let summary = *histogram.0.lock().unwrap_or_else(PoisonError::into_inner);
            add(&key, FigureValue::Histogram(summary));
        }
        figures.sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
        figures
    }
}

impl Recorder for Collector {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.registry.get_or_create_counter(key, Arc::clone))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.registry.get_or_create_gauge(key, Arc::clone))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.registry.get_or_create_histogram(key, Arc::clone))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn counters_gauges_and_histograms_read_back() {
        let collector = Collector::new();
        metrics::with_local_recorder(&collector, || {
            metrics::counter!("c", "l" => "x").increment(2);
            metrics::counter!("c", "l" => "x").increment(1);
            metrics::gauge!("g").set(1.5);
            for v in [3.0, 1.0, 2.0] {
                metrics::histogram!("h").record(v);
            }
        });
        let figures = collector.snapshot();
        let get = |name: &str| figures.iter().find(|f| f.name == name).unwrap();
        assert_eq!(get("c").value, FigureValue::Counter(3));
        assert_eq!(get("c").labels, [("l".to_owned(), "x".to_owned())]);
        assert_eq!(get("g").value, FigureValue::Gauge(1.5));
        assert_eq!(
            get("h").value,
            FigureValue::Histogram(Summary {
                count: 3,
                sum: 6.0,
                min: 1.0,
                max: 3.0
            })
        );
        // Reading does not drain.
        assert_eq!(collector.snapshot(), figures);
    }
}
