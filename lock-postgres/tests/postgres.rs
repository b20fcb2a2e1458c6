//! The PostgreSQL store against a real server (started by `./scripts/test`):
//! the conformance suite, racing writers, the statements' outcomes, schema
//! creation and validation, and how each failure is classified.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // each test binary uses part of the shared set-up
mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{
    ConditionalStore, DataUpdate, Expect, Fence, FenceUpdate, LockKey, NewRecord, Outcome, Rvn,
    StoreErrorKind,
};
use lock_postgres::{PostgresStore, SchemaError, Timeouts};

use support::{admin_url, connect, fresh_store, fresh_store_with, table_name, url};

mod conformance {
    lock_testkit::conformance_suite!(crate::support::TableFactory);
}

fn write(owner: &str, released: bool, fence: FenceUpdate) -> NewRecord {
    NewRecord {
        owner: owner.into(),
        rvn: Rvn::fresh(),
        lease: Duration::from_secs(20),
        released,
        fence,
        data: DataUpdate::Keep,
        expires_at: None,
    }
}

/// `key` acquired (vacant, fence stepped) by `owner` through `store`.
async fn acquire(store: &PostgresStore, key: &LockKey, owner: &str) -> lock_core::LockRecord {
    applied(
        store
            .put(key, Expect::Vacant, write(owner, false, FenceUpdate::Next))
            .await
            .unwrap(),
    )
}

fn applied(outcome: Outcome) -> lock_core::LockRecord {
    match outcome {
        Outcome::Applied(record) => record,
        other => panic!("expected the write to apply, got {other:?}"),
    }
}

/// Many connections race for one key, in many trials: a fresh key (the insert
/// branch), a released key (the conflict branch) and a takeover of one version
/// (the update branch). Exactly one writer wins each race, and every loser is
/// shown the winner's row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_key_have_exactly_one_winner_every_time() {
    const WRITERS: usize = 12;
    const TRIALS: usize = 60;
    let Some(first) = fresh_store_with(|b| b.max_connections(2)).await else {
        return;
    };
    let url = url().unwrap();
    // Each writer has its own pool, so the statements really run at once.
    let stores: Vec<PostgresStore> = (0..WRITERS)
        .map(|_| support::same_table(&first, &url, |b| b.max_connections(1)))
        .collect();
    for store in &stores {
        store.get(&LockKey::new("warm-up")).await.unwrap();
    }
    let stores = Arc::new(stores);
    for trial in 0..TRIALS {
        let key = LockKey::with_sort("race", format!("trial-{trial}"));
        // The fresh key's first fence (the server clock's floor), then one
        // more each round.
        let mut first_fence = None;
        for (round, branch) in ["fresh", "released", "takeover"].into_iter().enumerate() {
            let expect = match round {
                0 | 1 => Expect::Vacant,
                _ => Expect::Version(first.get(&key).await.unwrap().unwrap().rvn),
            };
            let mut tasks = Vec::new();
            for writer in 0..WRITERS {
                let stores = stores.clone();
                let key = key.clone();
                let expect = expect.clone();
                tasks.push(tokio::spawn(async move {
                    let new = write(&format!("w{writer}"), false, FenceUpdate::Next);
                    stores[writer].put(&key, expect, new).await
                }));
            }
            let mut winners = Vec::new();
            let mut losers = Vec::new();
            for task in tasks {
                match task.await.unwrap().unwrap() {
                    Outcome::Applied(record) => winners.push(record),
                    Outcome::Rejected { current } => losers.push(current),
                }
            }
            assert_eq!(winners.len(), 1, "trial {trial}, {branch} key: {winners:?}");
            let winner = &winners[0];
            let first_fence = *first_fence.get_or_insert(winner.fence);
            assert_eq!(
                winner.fence,
                Fence(first_fence.get() + round as u64),
                "trial {trial} round {round}"
            );
            for current in losers {
                // A loser of the fresh-key race may not see the row (it was
                // created after its statement began): it reports none, and the
                // client reads.
                match current {
                    Some(current) => assert_eq!(current.rvn, winner.rvn, "trial {trial}"),
                    None => assert_eq!(round, 0, "trial {trial} round {round}: no current row"),
                }
            }
            let stored = first.get(&key).await.unwrap().unwrap();
            assert_eq!(stored.rvn, winner.rvn);
            if round == 0 {
                // Release, for the next round's race on a released key.
                let mut release = write(&winner.owner, true, FenceUpdate::Keep);
                release.rvn = Rvn::fresh();
                applied(
                    first
                        .put(&key, Expect::Version(stored.rvn), release)
                        .await
                        .unwrap(),
                );
            }
        }
    }
}

#[tokio::test]
async fn each_statement_returns_the_row_it_decided_on() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let key = LockKey::new("job");
    let mut first = write("a", false, FenceUpdate::Next);
    first.data = DataUpdate::Replace(b"checkpoint".to_vec());
    first.expires_at = Some(1_900_000_000);
    let held = applied(store.put(&key, Expect::Vacant, first).await.unwrap());
    assert_eq!(held.data.as_deref(), Some(&b"checkpoint"[..]));
    assert_eq!(held.expires_at, Some(1_900_000_000));
    assert_eq!(held.lease, Duration::from_secs(20));

    // A rejected acquire, heartbeat and delete each return the current row.
    for outcome in [
        store
            .put(&key, Expect::Vacant, write("b", false, FenceUpdate::Next))
            .await
            .unwrap(),
        store
            .put(
                &key,
                Expect::Version(Rvn::fresh()),
                write("b", false, FenceUpdate::Keep),
            )
            .await
            .unwrap(),
        store.delete(&key, Expect::Vacant).await.unwrap(),
    ] {
        assert_eq!(
            outcome,
            Outcome::Rejected {
                current: Some(held.clone())
            }
        );
    }
    // A heartbeat keeps fence and data; a takeover steps the fence.
    let beat = applied(
        store
            .put(
                &key,
                Expect::Version(held.rvn.clone()),
                write("a", false, FenceUpdate::Keep),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        (beat.fence, beat.data.as_deref()),
        (held.fence, Some(&b"checkpoint"[..]))
    );
    let taken = applied(
        store
            .put(
                &key,
                Expect::Version(beat.rvn.clone()),
                write("b", false, FenceUpdate::Next),
            )
            .await
            .unwrap(),
    );
    assert_eq!(
        (taken.owner.as_str(), taken.fence),
        ("b", Fence(held.fence.get() + 1))
    );
    // Writes on an absent key by version are rejected with no row.
    let absent = LockKey::with_sort("job", "absent");
    assert_eq!(
        store
            .put(
                &absent,
                Expect::Version(Rvn::fresh()),
                write("c", false, FenceUpdate::Keep)
            )
            .await
            .unwrap(),
        Outcome::Rejected { current: None }
    );
}

/// A partition's listing includes its key without a sort key (stored as '')
/// and pages through the rest; the whole listing pages by key.
#[tokio::test]
async fn listings_page_by_key_and_a_partition_includes_its_bare_key() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let keys = [
        LockKey::new("job"),
        LockKey::with_sort("job", "a"),
        LockKey::with_sort("job", "b"),
        LockKey::with_sort("job", "c"),
        LockKey::new("other"),
    ];
    for key in &keys {
        acquire(&store, key, "me").await;
    }
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(Some("job"), cursor, 2).await.unwrap();
        assert!(page.records.len() <= 2);
        seen.extend(page.records.into_iter().map(|record| record.key));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen, keys[..4]);
    let all = store.list(None, None, 10).await.unwrap();
    assert_eq!(
        all.records.into_iter().map(|r| r.key).collect::<Vec<_>>(),
        keys
    );
    assert_eq!(all.next, None);

    // Bad pages are refused, not guessed.
    let error = store.list(None, None, 0).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
    let page = store.list(Some("job"), None, 1).await.unwrap();
    let error = store.list(Some("other"), page.next, 1).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Invalid, "{error}");
}

/// A statement whose caller stopped waiting (its future dropped, as the lock
/// client does at a deadline) may still run on its connection: that connection
/// is closed, not handed to the next statement to queue behind it.
#[tokio::test]
async fn a_dropped_statement_does_not_hold_up_the_next_one() {
    let Some(store) = fresh_store_with(|b| b.max_connections(1)).await else {
        return;
    };
    let key = LockKey::new("job");
    let (held, blocker) = held_and_row_locked(&store, &key).await;
    // A heartbeat waits on the row lock; its caller gives up.
    let waiting = store.put(
        &key,
        Expect::Version(held.rvn.clone()),
        write("a", false, FenceUpdate::Keep),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), waiting)
            .await
            .is_err(),
        "the heartbeat should wait on the row lock"
    );
    // The next statement gets a connection of its own at once (the old one
    // would still be busy until the statement timeout, 2 s).
    let started = std::time::Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(10), store.get(&key))
        .await
        .expect("bounded")
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the read queued behind the dropped statement: {:?}",
        started.elapsed()
    );
    assert_eq!(read.rvn, held.rvn);
    blocker.batch_execute("ROLLBACK").await.unwrap();
}

/// A write that committed but whose reply cannot be read (here a table whose
/// lease column is `integer`) is ambiguous, never "not applied".
#[tokio::test]
async fn an_unreadable_reply_to_a_write_is_ambiguous() {
    let Some(url) = url() else {
        return;
    };
    let table = table_name("narrow");
    let admin = connect(&url).await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (partition_key text NOT NULL, sort_key text NOT NULL, \
             owner text NOT NULL, rvn text NOT NULL, lease_ms integer NOT NULL, \
             released boolean NOT NULL, fence bigint NOT NULL, data bytea, expires_at bigint, \
             written_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (partition_key, sort_key))"
        ))
        .await
        .unwrap();
    let store = PostgresStore::builder(&table).build_from_url(&url).unwrap();
    let error = store
        .put(
            &LockKey::new("a"),
            Expect::Vacant,
            write("me", false, FenceUpdate::Next),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Ambiguous, "{error}");
    let rows = admin
        .query(&format!("SELECT owner FROM \"{table}\""), &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "the write did apply");
    let error = store.validate_schema().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("lease_ms is integer; it must be bigint"),
        "{error}"
    );
}

/// The clean-up statement of docs/postgres.md removes released rows last
/// written long ago, and nothing else.
#[tokio::test]
async fn the_documented_clean_up_removes_only_old_released_rows() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let release = |key: &'static str, rvn| {
        let store = store.clone();
        async move {
            applied(
                store
                    .put(
                        &LockKey::new(key),
                        Expect::Version(rvn),
                        write("me", true, FenceUpdate::Keep),
                    )
                    .await
                    .unwrap(),
            )
        }
    };
    for (key, released) in [
        ("old-released", true),
        ("old-held", false),
        ("new-released", true),
        ("reused", true),
    ] {
        let held = acquire(&store, &LockKey::new(key), "me").await;
        if released {
            release(key, held.rvn).await;
        }
    }
    let admin = connect(&url().unwrap()).await;
    let table = store.table();
    admin
        .batch_execute(&format!(
            "UPDATE \"{table}\" SET written_at = now() - interval '2 days' \
             WHERE partition_key IN ('old-released', 'old-held', 'reused')"
        ))
        .await
        .unwrap();
    // An old released row acquired and released again is written now: the
    // acquire (ON CONFLICT) and the release (UPDATE) each set written_at.
    let age_of_reused = || async {
        let row = admin
            .query_one(
                &format!(
                    "SELECT (now() - written_at) < interval '1 minute' FROM \"{table}\" \
                     WHERE partition_key = 'reused'"
                ),
                &[],
            )
            .await
            .unwrap();
        let recent: bool = row.get(0);
        recent
    };
    let again = acquire(&store, &LockKey::new("reused"), "me").await;
    assert!(age_of_reused().await, "the acquire set written_at");
    admin
        .batch_execute(&format!(
            "UPDATE \"{table}\" SET written_at = now() - interval '2 days' \
             WHERE partition_key = 'reused'"
        ))
        .await
        .unwrap();
    release("reused", again.rvn).await;
    assert!(age_of_reused().await, "the release set written_at");
    let deleted = admin
        .execute(
            &format!(
                "DELETE FROM \"{table}\" WHERE released AND written_at < now() - interval '1 day'"
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(
        store.get(&LockKey::new("old-released")).await.unwrap(),
        None
    );
    assert!(
        store
            .get(&LockKey::new("old-held"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(store.get(&LockKey::new("reused")).await.unwrap().is_some());
    assert!(
        store
            .get(&LockKey::new("new-released"))
            .await
            .unwrap()
            .is_some()
    );
}

/// A released row deleted by the scheduled clean-up above (or a TRUNCATE,
/// or `lockctl release --force` of a deleted row): the key's next fence is
/// higher than every fence it had, so a holder paused across the deletion
/// is refused at a fenced resource. The first fence of a row is the server
/// clock's floor.
#[tokio::test]
async fn fences_keep_rising_after_the_row_is_deleted_by_hand() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let admin = connect(&url().unwrap()).await;
    let before = Fence::floor_at(std::time::SystemTime::now() - Duration::from_secs(60));
    for (key, deletion) in [
        ("deleted", format!("DELETE FROM \"{}\"", store.table())),
        ("truncated", format!("TRUNCATE \"{}\"", store.table())),
    ] {
        let (_, next) = lock_testkit::scenarios::fences_rise_after_a_deletion_by_hand(
            &store,
            &LockKey::new(key),
            async { admin.batch_execute(&deletion).await.unwrap() },
        )
        .await;
        assert!(next >= before, "the server clock's floor: {next}");
    }
}

#[tokio::test]
async fn create_schema_is_idempotent_and_validate_accepts_it() {
    let Some(store) = fresh_store().await else {
        return;
    };
    store.create_schema().await.unwrap();
    store.validate_schema().await.unwrap();
    // A schema-qualified name works the same way.
    let admin = connect(&url().unwrap()).await;
    let schema = table_name("ops");
    admin
        .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
        .await
        .unwrap();
    let qualified = PostgresStore::builder(format!("{schema}.locks"))
        .build_from_url(&url().unwrap())
        .unwrap();
    assert!(matches!(
        qualified.validate_schema().await,
        Err(SchemaError::Missing { .. })
    ));
    qualified.create_schema().await.unwrap();
    let record = acquire(&qualified, &LockKey::new("a"), "me").await;
    assert!(record.fence > Fence(0));
}

#[tokio::test]
async fn a_table_of_another_shape_is_refused_precisely() {
    let Some(url) = url() else {
        return;
    };
    let table = table_name("wrong");
    let admin = connect(&url).await;
    admin
        .batch_execute(&format!(
            "CREATE TABLE \"{table}\" (partition_key varchar(64) NOT NULL PRIMARY KEY, \
             sort_key text NOT NULL, owner text, lease_ms bigint NOT NULL, released boolean NOT NULL, \
             fence bigint NOT NULL, data bytea, expires_at bigint)"
        ))
        .await
        .unwrap();
    let store = PostgresStore::builder(&table).build_from_url(&url).unwrap();
    let error = store.validate_schema().await.unwrap_err();
    let SchemaError::Mismatch { problems, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(problems[0].contains("partition_key is character varying(64); it must be text"));
    assert!(problems[1].contains("owner allows NULL"));
    assert!(problems[2].contains("rvn is missing"));
    assert!(problems[3].contains("written_at timestamp with time zone NOT NULL DEFAULT now()"));
    assert!(problems[4].contains("primary key is (partition_key)"));
    // create_schema never alters a table it did not create.
    assert!(matches!(
        store.create_schema().await,
        Err(SchemaError::Mismatch { .. })
    ));
}

#[tokio::test]
async fn a_missing_table_names_the_table_and_how_to_create_it() {
    let Some(url) = url() else {
        return;
    };
    let table = table_name("missing");
    let store = PostgresStore::builder(&table).build_from_url(&url).unwrap();
    let error = store.get(&LockKey::new("a")).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::NotFound, "{error}");
    assert!(error.to_string().contains(&table), "{error}");
    assert!(error.to_string().contains("create_schema"), "{error}");
    let error = store
        .put(
            &LockKey::new("a"),
            Expect::Vacant,
            write("me", false, FenceUpdate::Next),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::NotFound, "{error}");
    let error = store.validate_schema().await.unwrap_err();
    assert!(
        error.to_string().contains("lockctl create-table"),
        "{error}"
    );
}

#[tokio::test]
async fn refused_connections_are_unavailable_and_nothing_was_sent() {
    // A loopback port nobody listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let store = PostgresStore::builder("locks")
        .build_from_url(&format!("postgres://nobody:x@127.0.0.1:{port}/db"))
        .unwrap();
    let error = store
        .put(
            &LockKey::new("a"),
            Expect::Vacant,
            write("me", false, FenceUpdate::Next),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert!(error.to_string().contains("nothing was sent"), "{error}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn a_wrong_password_and_missing_grants_are_unauthorized_at_once() {
    let Some(store) = fresh_store().await else {
        return;
    };
    let url = url().unwrap();
    let wrong = url.replacen("lock_test:lock_test@", "lock_test:wrong@", 1);
    assert_ne!(wrong, url, "the test URL carries the password");
    let denied = PostgresStore::builder(store.table())
        .build_from_url(&wrong)
        .unwrap();
    let error = denied.get(&LockKey::new("a")).await.unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("password"), "{error}");
    // No password at all: the server asks for one, the client has none.
    let none = url.replacen("lock_test:lock_test@", "lock_test@", 1);
    let error = PostgresStore::builder(store.table())
        .build_from_url(&none)
        .unwrap()
        .get(&LockKey::new("a"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");
    assert!(error.to_string().contains("set the password"), "{error}");

    // A role that may log in but was granted nothing on the table.
    let admin = connect(&admin_url()).await;
    let role = table_name("reader");
    admin
        .batch_execute(&format!(
            "CREATE ROLE \"{role}\" LOGIN PASSWORD 'pw'; GRANT CONNECT ON DATABASE lock_test TO \"{role}\""
        ))
        .await
        .unwrap();
    let as_role = url.replacen("lock_test:lock_test@", &format!("{role}:pw@"), 1);
    let powerless = PostgresStore::builder(store.table())
        .build_from_url(&as_role)
        .unwrap();
    let error = powerless
        .put(
            &LockKey::new("a"),
            Expect::Vacant,
            write("me", false, FenceUpdate::Next),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unauthorized, "{error}");
    assert!(
        error
            .to_string()
            .contains("GRANT SELECT, INSERT, UPDATE, DELETE"),
        "{error}"
    );
    let error = powerless.validate_schema().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("lacks SELECT, INSERT, UPDATE, DELETE"),
        "{error}"
    );
    // The documented grants are enough for every operation.
    admin
        .batch_execute(&format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON \"{}\" TO \"{role}\"",
            store.table()
        ))
        .await
        .unwrap();
    powerless.validate_schema().await.unwrap();
    let held = acquire(&powerless, &LockKey::new("a"), "me").await;
    applied(
        powerless
            .delete(&LockKey::new("a"), Expect::Version(held.rvn))
            .await
            .unwrap(),
    );
}

/// `key` acquired through `store`, and its row then locked by hand in an open
/// transaction on a connection of its own (`ROLLBACK` on it lets go).
async fn held_and_row_locked(
    store: &PostgresStore,
    key: &LockKey,
) -> (lock_core::LockRecord, tokio_postgres::Client) {
    let held = acquire(store, key, "a").await;
    let blocker = connect(&url().unwrap()).await;
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT * FROM \"{}\" WHERE partition_key = '{}' FOR UPDATE",
            store.table(),
            key.partition()
        ))
        .await
        .unwrap();
    (held, blocker)
}

/// A statement that waits past the statement timeout (here on a row lock held
/// by hand) is cancelled by the server and rolled back: retryable, not
/// ambiguous, and nothing was written.
#[tokio::test]
async fn a_statement_timeout_is_rolled_back_and_retryable() {
    let Some(store) = fresh_store_with(|b| {
        b.timeouts(
            Timeouts::default()
                .with_statement(Duration::from_millis(300))
                .with_reply(Duration::from_secs(5)),
        )
    })
    .await
    else {
        return;
    };
    let key = LockKey::new("job");
    let (held, blocker) = held_and_row_locked(&store, &key).await;
    let error = store
        .put(
            &key,
            Expect::Version(held.rvn.clone()),
            write("a", false, FenceUpdate::Keep),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), StoreErrorKind::Unavailable, "{error}");
    assert!(error.to_string().contains("rolled back"), "{error}");
    blocker.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(store.get(&key).await.unwrap().unwrap().rvn, held.rvn);
}
