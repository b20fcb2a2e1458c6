//! Every Redis test of `tests/redis.rs`, on Valkey: the same file, compiled
//! into this test binary, whose servers `tests/support/mod.rs` takes from
//! `LOCK_VALKEY_URL` and `LOCK_VALKEY_BIN` (set by `./scripts/test`), because
//! this binary is named `valkey`.

#[path = "redis.rs"]
mod on_valkey;
