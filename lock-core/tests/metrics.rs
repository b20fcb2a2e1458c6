//! The client's metrics, read back through a recorder: every figure docs/operations.md
//! lists moves when its event happens, with bounded labels unless key labels
//! are asked for. Over the in-memory store, in paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::time::Duration;

use lock_core::metrics;
use lock_core::{
    AcquireOptions, DataUpdate, Expect, FenceUpdate, LockClient, LockKey, NewRecord, Rvn,
};
use lock_memory::{FaultyStore, MemoryStore};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::{LEASE, client, dead_holder, wait};

/// One series: name, labels, value.
type Series = (String, Vec<(String, String)>, DebugValue);

/// Run `test` on a paused current-thread runtime with a recorder of its own
/// (thread-local, so tests in parallel do not see each other's figures), and
/// take one snapshot at the end (taking one drains the recorder).
fn recorded<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> Figures {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || paused(test()));
    Figures(series(&snapshotter))
}

/// Run `test` to its end on a current-thread runtime with paused time, on
/// this thread (so a thread-local recorder or subscriber sees it).
fn paused(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(test);
}

fn series(snapshotter: &Snapshotter) -> Vec<Series> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect()
}

struct Figures(Vec<Series>);

impl Figures {
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a DebugValue> + 'a {
        self.0
            .iter()
            .filter(move |(found, have, _)| {
                found == name
                    && labels
                        .iter()
                        .all(|(label, value)| have.iter().any(|(l, v)| l == label && v == value))
            })
            .map(|(_, _, value)| value)
    }

    /// Every series of `name` whose labels include `labels`, summed:
    /// counters and gauges by value, histograms by their number of samples.
    fn total(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels)
            .map(|value| match value {
                DebugValue::Counter(n) => *n as f64,
                DebugValue::Gauge(v) => v.into_inner(),
                DebugValue::Histogram(samples) => samples.len() as f64,
            })
            .sum()
    }

    /// The samples of histogram `name` with `labels`.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .flat_map(|value| match value {
                DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn has_key_labels(&self) -> bool {
        self.0
            .iter()
            .any(|(_, labels, _)| labels.iter().any(|(l, _)| l == "key"))
    }
}

#[test]
fn acquires_heartbeats_and_store_calls_are_counted_and_timed() {
    let figures = recorded(|| async {
        let store = MemoryStore::new();
        let a = client(store.clone(), "a");
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        // Heartbeats every 2 s: three in 7 s.
        tokio::time::sleep(Duration::from_secs(7)).await;
        let b = client(store.clone(), "b");
        let busy = b.acquire("job", wait(Duration::from_secs(3))).await;
        assert!(busy.is_err());
        guard.release().await.unwrap();
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
    });
    let get = |name, labels: &[(&str, &str)]| figures.total(name, labels);
    assert_eq!(get(metrics::ACQUIRES, &[("outcome", "acquired")]), 1.0);
    assert_eq!(get(metrics::ACQUIRES, &[("outcome", "timeout")]), 1.0);
    // Acquire latency for both; wait time only for the one that found it taken.
    assert_eq!(get(metrics::ACQUIRE_SECONDS, &[]), 2.0);
    let waited = figures.samples(metrics::ACQUIRE_WAIT_SECONDS, &[("outcome", "timeout")]);
    assert_eq!(waited.len(), 1);
    assert!((waited[0] - 3.0).abs() < 0.01, "{waited:?}");
    assert_eq!(
        get(metrics::ACQUIRE_WAIT_SECONDS, &[("outcome", "acquired")]),
        0.0
    );
    // Every 2 s over the 10 s held (the first jittered to 1.5-2 s): 4 or 5,
    // each one applied put besides the acquire's and the release's.
    let beats = get(metrics::HEARTBEATS, &[("outcome", "confirmed")]);
    assert!((4.0..=5.0).contains(&beats), "{beats}");
    assert_eq!(get(metrics::HEARTBEATS, &[("outcome", "late")]), 0.0);
    assert_eq!(
        get(
            metrics::STORE_CALLS,
            &[("op", "put"), ("outcome", "applied")]
        ),
        beats + 2.0
    );
    // Sent on time (the first one early, jittered), so no lateness.
    let lateness = figures.samples(metrics::HEARTBEAT_LATENESS_SECONDS, &[]);
    assert_eq!(lateness.len() as f64, beats);
    assert!(lateness.iter().all(|late| *late < 0.01), "{lateness:?}");
    // b's attempts were rejected or read.
    assert!(
        get(
            metrics::STORE_CALLS,
            &[("op", "put"), ("outcome", "rejected")]
        ) >= 1.0
    );
    assert!(get(metrics::STORE_CALLS, &[("op", "get"), ("outcome", "ok")]) >= 1.0);
    assert_eq!(
        get(metrics::STORE_CALL_SECONDS, &[]),
        get(metrics::STORE_CALLS, &[]),
        "every call timed"
    );
    assert_eq!(get(metrics::LOCKS_HELD, &[]), 0.0, "none held at the end");
    assert_eq!(
        get(metrics::SHUTDOWN_LOCKS, &[]),
        0.0,
        "released before shutdown"
    );
}

#[test]
fn losses_takeovers_hand_offs_errors_and_shutdowns_are_counted() {
    let figures = recorded(|| async {
        let store = MemoryStore::new();
        let faulty = FaultyStore::new(store.clone(), 7);
        let a = client(faulty.clone(), "a");
        // Stolen: another owner overwrites the record; the next heartbeat sees it.
        let stolen = a.acquire("stolen", AcquireOptions::new()).await.unwrap();
        let rvn = store.record(&LockKey::new("stolen")).unwrap().rvn;
        let thief = NewRecord {
            owner: "thief".into(),
            rvn: Rvn::fresh(),
            lease: LEASE,
            released: false,
            fence: FenceUpdate::Next,
            data: DataUpdate::Keep,
            expires_at: None,
        };
        lock_core::ConditionalStore::put(
            &store,
            &LockKey::new("stolen"),
            Expect::Version(rvn),
            thief,
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            matches!(stolen.state(), lock_core::LeaseState::Lost { .. }),
            "{:?}",
            stolen.state()
        );
        // A takeover of a crashed holder's lock.
        dead_holder(&store, "orphan", AcquireOptions::new()).await;
        let orphan = a.acquire("orphan", AcquireOptions::new()).await.unwrap();
        assert!(orphan.took_over().is_some());
        // A hand-off to another task of the client.
        let first = a.acquire("shared", AcquireOptions::new()).await.unwrap();
        let next = {
            let a = a.clone();
            tokio::spawn(async move { a.acquire("shared", AcquireOptions::new()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        first.release().await.unwrap();
        let second = next.await.unwrap().unwrap();
        // A store outage: the reads fail as unavailable.
        faulty.set_unavailable(true);
        let _ = a.get_lock("orphan").await;
        faulty.set_unavailable(false);
        // Two locks left for shutdown to release.
        let left = (second, orphan, stolen);
        a.shutdown().await.unwrap();
        drop(left);
    });
    let get = |name, labels: &[(&str, &str)]| figures.total(name, labels);
    assert_eq!(get(metrics::LOCKS_LOST, &[("reason", "stolen")]), 1.0);
    assert_eq!(
        get(metrics::LOCKS_LOST, &[]),
        1.0,
        "a release is not a loss"
    );
    assert_eq!(get(metrics::HEARTBEATS, &[("outcome", "failed")]), 1.0);
    assert_eq!(get(metrics::TAKEOVERS, &[]), 1.0);
    assert_eq!(get(metrics::LOCAL_HANDOFFS, &[]), 1.0);
    assert!(
        get(
            metrics::STORE_CALLS,
            &[("op", "get"), ("outcome", "unavailable")]
        ) >= 1.0
    );
    assert_eq!(get(metrics::SHUTDOWN_LOCKS, &[("result", "released")]), 2.0);
    assert_eq!(get(metrics::LOCKS_HELD, &[]), 0.0);
    // No key label unless asked for.
    assert!(!figures.has_key_labels());
}

#[test]
fn key_labels_are_added_only_when_asked_for() {
    let figures = recorded(|| async {
        let store = MemoryStore::new();
        let a = LockClient::builder(store.clone())
            .owner("a")
            .metric_key_labels(true)
            .build()
            .unwrap();
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        guard.release().await.unwrap();
        a.shutdown().await.unwrap();
    });
    assert_eq!(
        figures.total(
            metrics::ACQUIRES,
            &[("outcome", "acquired"), ("key", "job")]
        ),
        1.0
    );
    assert_eq!(
        figures.total(metrics::STORE_CALLS, &[("op", "put"), ("key", "job")]),
        2.0
    );
}

#[test]
fn describe_gives_every_metric_a_unit() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    ::metrics::with_local_recorder(&recorder, || {
        metrics::describe();
        let _client = LockClient::builder(MemoryStore::new()).build().unwrap();
    });
    let units: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, unit, description, _)| (key.key().name().to_owned(), unit, description))
        .collect();
    for name in [
        metrics::STORE_CALLS,
        metrics::STORE_CALL_SECONDS,
        metrics::ACQUIRES,
        metrics::ACQUIRE_SECONDS,
        metrics::ACQUIRE_WAIT_SECONDS,
        metrics::TAKEOVERS,
        metrics::LOCAL_HANDOFFS,
        metrics::HEARTBEATS,
        metrics::HEARTBEAT_LATENESS_SECONDS,
        metrics::LOCKS_HELD,
        metrics::LOCKS_LOST,
        metrics::SHUTDOWN_LOCKS,
    ] {
        let (_, unit, description) = units
            .iter()
            .find(|(found, _, _)| found == name)
            .unwrap_or_else(|| panic!("{name} is registered by every client"));
        assert!(unit.is_some() && description.is_some(), "{name}");
        let seconds = name.ends_with("_seconds");
        assert_eq!(
            *unit == Some(::metrics::Unit::Seconds),
            seconds,
            "{name}: {unit:?}"
        );
    }
}

#[test]
fn a_heartbeat_confirmed_after_the_safe_time_is_late_and_a_delayed_one_has_lateness() {
    let figures = recorded(|| async {
        let store = support::Delayed::new(MemoryStore::new());
        // Lease 10 s, safe time 9.4 s: the first heartbeat (sent at 1.5-2 s,
        // jittered) takes 7.95 s to answer, so it is confirmed at 9.45-9.95 s:
        // after the safe time, before the lease ends.
        let a = client(store.clone(), "a");
        let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
        store.delay_writes(Duration::from_millis(7_950));
        tokio::time::sleep(Duration::from_millis(2_100)).await;
        store.delay_writes(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(guard.is_safe(), "{:?}", guard.state());
        guard.release().await.unwrap();
        a.shutdown().await.unwrap();

        // One heartbeat a second for three locks due together: the second
        // and third go about one and two seconds late.
        let b = LockClient::builder(MemoryStore::new())
            .owner("b")
            .lease(LEASE)
            .heartbeat_period(Duration::from_secs(2))
            .heartbeat_rate_limit(1)
            .build()
            .unwrap();
        let mut held = Vec::new();
        for key in ["x", "y", "z"] {
            held.push(b.acquire(key, AcquireOptions::new()).await.unwrap());
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        b.shutdown().await.unwrap();
        drop(held);
    });
    assert_eq!(
        figures.total(metrics::HEARTBEATS, &[("outcome", "late")]),
        1.0
    );
    let lateness = figures.samples(metrics::HEARTBEAT_LATENESS_SECONDS, &[]);
    let most = lateness.iter().copied().fold(0.0, f64::max);
    assert!(most > 0.9, "{lateness:?}");
}

#[test]
fn a_prometheus_exporter_renders_them() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    ::metrics::with_local_recorder(&recorder, || {
        metrics::describe();
        paused(async {
            let a = client(MemoryStore::new(), "a");
            let guard = a.acquire("job", AcquireOptions::new()).await.unwrap();
            guard.release().await.unwrap();
            a.shutdown().await.unwrap();
        });
    });
    let text = handle.render();
    for line in [
        "# TYPE lock_acquires_total counter",
        "lock_acquires_total{outcome=\"acquired\"} 1",
        "lock_store_calls_total{op=\"put\",outcome=\"applied\"} 2",
        "# HELP lock_heartbeats_total Heartbeats by outcome",
        "lock_locks_held 0",
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
    assert!(
        text.contains("lock_store_call_seconds_count{op=\"put\",outcome=\"applied\"} 2"),
        "{text}"
    );
}
