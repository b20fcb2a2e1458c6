//! What a store's reply means for this client: the record an acquire finds,
//! a rejected or ambiguous write to a held record, and a release by record
//! version whose answer was lost. Pure decisions over the record the
//! store holds now and the writes this client made, beside the timing
//! decisions of [`timing`](crate::timing): the callers (`acquire`, `write`,
//! `detached`) only carry them out.
//!
//! Every write carries a fresh RVN, so a record showing one of this client's
//! unresolved RVNs proves that write applied. A record that shows none of them
//! is someone else's, with one exception: after a release of ours whose answer
//! was lost, a key that moved on is the release done.

use crate::clock::Instant;
use crate::{Fence, LockRecord, Rvn};

/// What the record an acquire read (or was shown by a rejection) is to it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireFinds {
    /// No record: the key is vacant.
    Vacant,
    /// One of this acquire's own writes, sent at `sent`, applied.
    Ours { record: LockRecord, sent: Instant },
    /// Still the version the previous local holder handed over.
    Handed(LockRecord),
    /// Released by whoever held it: vacant for a write.
    Released(LockRecord),
    /// Held by someone else.
    Held(LockRecord),
}

/// Decide what `current` is to an acquire whose unresolved writes are
/// `writes` (RVN and send time) and which was handed the version `handed`.
/// A write of ours comes first: it may have applied on top of the handed
/// version, or on a released record.
pub(crate) fn acquire_finds(
    current: Option<LockRecord>,
    writes: &[(Rvn, Instant)],
    handed: Option<&Rvn>,
) -> AcquireFinds {
    let Some(record) = current else {
        return AcquireFinds::Vacant;
    };
    if let Some((_, sent)) = writes.iter().find(|(rvn, _)| *rvn == record.rvn) {
        let sent = *sent;
        return AcquireFinds::Ours { record, sent };
    }
    if handed == Some(&record.rvn) {
        AcquireFinds::Handed(record)
    } else if record.released {
        AcquireFinds::Released(record)
    } else {
        AcquireFinds::Held(record)
    }
}

/// After a release of ours whose answer was lost, the record no longer shows
/// the acquisition released (whose fence is `fence`): the key is vacant, the
/// record is released, or a later acquisition holds it (a higher fence). Most
/// likely the release applied and the key moved on; whether or not it did,
/// the acquisition is no longer held, which is all a release asks.
pub(crate) fn release_moved_on(current: Option<&LockRecord>, fence: Fence) -> bool {
    current.is_none_or(|record| record.released || record.fence > fence)
}

/// What a held write needs the record to show to have done its work, once one
/// of this client's writes is found applied.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wants<'a> {
    /// A heartbeat: any write of ours extends the lease.
    Heartbeat,
    /// A data update: the record holds this data.
    Data(&'a Option<Vec<u8>>),
    /// A release: the record is marked released.
    Released,
    /// A final write keeping the lock to the end of its min hold: that very
    /// write (one of this call's own) applied.
    FinalHold,
    /// A delete: an applied write of ours is a record still there.
    Deleted,
}

impl Wants<'_> {
    /// A confirmed write of this kind ends the hold.
    fn releases(self) -> bool {
        matches!(self, Self::Released | Self::FinalHold | Self::Deleted)
    }
}

/// The writes of a held lock whose outcome is unknown, as a rejection finds them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unresolved<'a> {
    /// Writes sent whose outcome is unknown, with their send times.
    pub pending: &'a [(Rvn, Instant)],
    /// A delete of ours failed ambiguously.
    pub ambiguous_delete: bool,
    /// The RVNs the releasing call itself sent (an earlier heartbeat left
    /// unresolved does not make a key that moved on a release).
    pub own: &'a [Rvn],
    /// The fence of the acquisition written to.
    pub fence: Fence,
}

/// What a rejected write to a held record means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeldRejection {
    /// An earlier write of ours, `rvn` sent at `sent`, applied: the lease runs
    /// from its send time and the record holds `data`. With `done` it did
    /// what this write asks; otherwise this write is repeated on top of it.
    Applied {
        rvn: Rvn,
        sent: Instant,
        data: Option<Vec<u8>>,
        done: bool,
    },
    /// A release of ours applied and the key moved on.
    Released,
    /// The record is someone else's (the owner in it; `None`: no record).
    Stolen { owner: Option<String> },
}

/// Decide a write to a held record that the store rejected, from the record it
/// holds now (`current`) and this client's unresolved writes.
pub(crate) fn held_write_rejected(
    wants: Wants<'_>,
    unresolved: Unresolved<'_>,
    current: Option<LockRecord>,
) -> HeldRejection {
    let ambiguous_delete = matches!(wants, Wants::Deleted) && unresolved.ambiguous_delete;
    // A write of this release whose outcome is unknown. (After an earlier
    // heartbeat left unresolved, a higher fence is a takeover of a lease that
    // lapsed, which is a theft.)
    let releasing_unresolved = ambiguous_delete
        || (wants.releases()
            && unresolved
                .pending
                .iter()
                .any(|(rvn, _)| unresolved.own.contains(rvn)));
    let Some(record) = current else {
        return if releasing_unresolved {
            HeldRejection::Released
        } else {
            HeldRejection::Stolen { owner: None }
        };
    };
    if let Some((rvn, sent)) = unresolved
        .pending
        .iter()
        .find(|(rvn, _)| *rvn == record.rvn)
    {
        let done = match wants {
            Wants::Heartbeat => true,
            Wants::Data(data) => record.data == *data,
            Wants::Released => record.released,
            Wants::FinalHold => unresolved.own.contains(rvn),
            Wants::Deleted => false,
        };
        return HeldRejection::Applied {
            rvn: rvn.clone(),
            sent: *sent,
            data: record.data,
            done,
        };
    }
    // Whoever holds the key after a delete has a higher fence (the store's
    // FencesAfterDeletion), but an adapter whose fences restart may give a
    // lower one: only the ambiguous delete itself says it moved on.
    if ambiguous_delete
        || (releasing_unresolved && release_moved_on(Some(&record), unresolved.fence))
    {
        return HeldRejection::Released;
    }
    HeldRejection::Stolen {
        owner: Some(record.owner),
    }
}

/// What the record read after a release by version (of the record `released`)
/// means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum VersionRelease {
    /// One of the releases sent (`sent`) applied: done.
    Applied,
    /// The key moved on after a release whose answer was lost: done too.
    MovedOn,
    /// The record still carries the version: nothing applied yet, write again.
    WriteAgain,
    /// The record no longer carries the version, and no release of ours can
    /// explain it.
    NotOwned,
}

/// Decide a release by version from the record the store holds now.
pub(crate) fn version_release(
    current: Option<&LockRecord>,
    released: &LockRecord,
    sent: &[Rvn],
) -> VersionRelease {
    match current {
        Some(now) if sent.contains(&now.rvn) => VersionRelease::Applied,
        Some(now) if now.rvn == released.rvn => VersionRelease::WriteAgain,
        other if !sent.is_empty() && release_moved_on(other, released.fence) => {
            VersionRelease::MovedOn
        }
        _ => VersionRelease::NotOwned,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::LockKey;

    fn record(rvn: &Rvn, fence: u64, released: bool, data: Option<&[u8]>) -> LockRecord {
        LockRecord {
            key: LockKey::new("k"),
            owner: "other".into(),
            rvn: rvn.clone(),
            lease: Duration::from_secs(10),
            released,
            fence: Fence(fence),
            data: data.map(<[u8]>::to_vec),
            expires_at: None,
            written: None,
        }
    }

    fn unresolved<'a>(
        pending: &'a [(Rvn, Instant)],
        own: &'a [Rvn],
        ambiguous_delete: bool,
    ) -> Unresolved<'a> {
        Unresolved {
            pending,
            ambiguous_delete,
            own,
            fence: Fence(5),
        }
    }

    #[test]
    fn an_acquire_finds_its_own_write_first_then_the_handed_version() {
        let now = Instant::now();
        let (first, second, handed) = (Rvn::fresh(), Rvn::fresh(), Rvn::fresh());
        let writes = [
            (first.clone(), now),
            (second.clone(), now + Duration::from_secs(1)),
        ];
        assert_eq!(
            acquire_finds(None, &writes, Some(&handed)),
            AcquireFinds::Vacant
        );
        // Ours, released or not, handed or not: the write's own send time.
        for released in [false, true] {
            let ours = record(&second, 5, released, None);
            assert_eq!(
                acquire_finds(Some(ours.clone()), &writes, Some(&second)),
                AcquireFinds::Ours {
                    record: ours,
                    sent: now + Duration::from_secs(1)
                }
            );
        }
        let handed_record = record(&handed, 5, false, None);
        assert_eq!(
            acquire_finds(Some(handed_record.clone()), &writes, Some(&handed)),
            AcquireFinds::Handed(handed_record.clone())
        );
        // Not handed to this acquire: someone else's.
        assert_eq!(
            acquire_finds(Some(handed_record.clone()), &writes, None),
            AcquireFinds::Held(handed_record)
        );
        let released = record(&Rvn::fresh(), 5, true, None);
        assert_eq!(
            acquire_finds(Some(released.clone()), &writes, Some(&handed)),
            AcquireFinds::Released(released)
        );
        // A handed version released since (by an operator) is still the hand-off:
        // the acquire writes on it.
        let handed_released = record(&handed, 5, true, None);
        assert_eq!(
            acquire_finds(Some(handed_released.clone()), &[], Some(&handed)),
            AcquireFinds::Handed(handed_released)
        );
    }

    #[test]
    fn a_key_moved_on_when_vacant_released_or_held_under_a_higher_fence_only() {
        let rvn = Rvn::fresh();
        assert!(release_moved_on(None, Fence(5)));
        assert!(release_moved_on(
            Some(&record(&rvn, 5, true, None)),
            Fence(5)
        ));
        assert!(release_moved_on(
            Some(&record(&rvn, 6, false, None)),
            Fence(5)
        ));
        assert!(!release_moved_on(
            Some(&record(&rvn, 5, false, None)),
            Fence(5)
        ));
        assert!(!release_moved_on(
            Some(&record(&rvn, 4, false, None)),
            Fence(5)
        ));
    }

    #[test]
    fn a_record_showing_a_pending_write_is_that_write_applied() {
        let now = Instant::now();
        let (mine, other) = (Rvn::fresh(), Rvn::fresh());
        let pending = [
            (other.clone(), now),
            (mine.clone(), now + Duration::from_secs(1)),
        ];
        let data = Some(b"new".to_vec());
        let cases: [(Wants<'_>, Option<&[u8]>, bool, bool); 6] = [
            (Wants::Heartbeat, None, false, true),
            (Wants::Data(&data), Some(b"new"), false, true),
            (Wants::Data(&data), Some(b"old"), false, false),
            (Wants::Released, None, true, true),
            (Wants::Released, None, false, false),
            (Wants::Deleted, None, false, false),
        ];
        for (wants, stored, released, done) in cases {
            let current = record(&mine, 5, released, stored);
            assert_eq!(
                held_write_rejected(wants, unresolved(&pending, &[], false), Some(current)),
                HeldRejection::Applied {
                    rvn: mine.clone(),
                    sent: now + Duration::from_secs(1),
                    data: stored.map(<[u8]>::to_vec),
                    done,
                },
                "{wants:?} with {stored:?}, released {released}"
            );
        }
        // A final write is done only when it is this call's own.
        for (own, done) in [(vec![mine.clone()], true), (vec![], false)] {
            let current = record(&mine, 5, false, None);
            let got = held_write_rejected(
                Wants::FinalHold,
                unresolved(&pending, &own, false),
                Some(current),
            );
            assert!(matches!(got, HeldRejection::Applied { done: d, .. } if d == done));
        }
    }

    #[test]
    fn after_a_release_of_ours_was_lost_a_key_that_moved_on_is_released() {
        let now = Instant::now();
        let mine = Rvn::fresh();
        let pending = [(mine.clone(), now)];
        let own = [mine.clone()];
        let moved = [
            None,
            Some(record(&Rvn::fresh(), 5, true, None)),
            Some(record(&Rvn::fresh(), 6, false, None)),
        ];
        for current in moved {
            for wants in [Wants::Released, Wants::FinalHold] {
                assert_eq!(
                    held_write_rejected(wants, unresolved(&pending, &own, false), current.clone()),
                    HeldRejection::Released,
                    "{wants:?} then {current:?}"
                );
            }
        }
        // The same fence, not released: someone else's write on our version.
        assert_eq!(
            held_write_rejected(
                Wants::Released,
                unresolved(&pending, &own, false),
                Some(record(&Rvn::fresh(), 5, false, None))
            ),
            HeldRejection::Stolen {
                owner: Some("other".into())
            }
        );
    }

    #[test]
    fn without_a_release_of_this_call_unresolved_a_key_that_moved_on_was_stolen() {
        let now = Instant::now();
        let heartbeat = Rvn::fresh();
        // A heartbeat left unresolved is pending, but not this release's own.
        let pending = [(heartbeat, now)];
        for current in [None, Some(record(&Rvn::fresh(), 6, false, None))] {
            let owner = current.as_ref().map(|record| record.owner.clone());
            for wants in [Wants::Released, Wants::Heartbeat] {
                assert_eq!(
                    held_write_rejected(wants, unresolved(&pending, &[], false), current.clone()),
                    HeldRejection::Stolen {
                        owner: owner.clone()
                    },
                );
            }
        }
        // A heartbeat's own write lost does not make a released record ours either.
        let mine = Rvn::fresh();
        assert_eq!(
            held_write_rejected(
                Wants::Heartbeat,
                unresolved(&[(mine.clone(), now)], &[mine], false),
                None
            ),
            HeldRejection::Stolen { owner: None }
        );
    }

    #[test]
    fn after_an_ambiguous_delete_any_other_record_is_the_delete_done() {
        let current = [None, Some(record(&Rvn::fresh(), 1, false, None))];
        for current in current {
            assert_eq!(
                held_write_rejected(Wants::Deleted, unresolved(&[], &[], true), current.clone()),
                HeldRejection::Released
            );
            assert_eq!(
                held_write_rejected(Wants::Deleted, unresolved(&[], &[], false), current.clone()),
                HeldRejection::Stolen {
                    owner: current.map(|record| record.owner)
                }
            );
            // An ambiguous delete says nothing about another kind of write.
            assert!(matches!(
                held_write_rejected(
                    Wants::Heartbeat,
                    unresolved(&[], &[], true),
                    Some(record(&Rvn::fresh(), 1, false, None))
                ),
                HeldRejection::Stolen { .. }
            ));
        }
    }

    #[test]
    fn a_release_by_version_is_done_when_ours_applied_or_the_key_moved_on_after_one() {
        let version = Rvn::fresh();
        let released = record(&version, 5, false, None);
        let ours = Rvn::fresh();
        let sent = [ours.clone()];
        let same = record(&version, 5, false, None);
        let applied = record(&ours, 5, true, None);
        let later = record(&Rvn::fresh(), 6, false, None);
        let vacated = record(&Rvn::fresh(), 5, true, None);
        let other = record(&Rvn::fresh(), 5, false, None);
        assert_eq!(
            version_release(Some(&applied), &released, &sent),
            VersionRelease::Applied
        );
        assert_eq!(
            version_release(Some(&same), &released, &sent),
            VersionRelease::WriteAgain
        );
        assert_eq!(
            version_release(Some(&same), &released, &[]),
            VersionRelease::WriteAgain
        );
        for moved in [None, Some(&later), Some(&vacated)] {
            assert_eq!(
                version_release(moved, &released, &sent),
                VersionRelease::MovedOn
            );
            assert_eq!(
                version_release(moved, &released, &[]),
                VersionRelease::NotOwned
            );
        }
        assert_eq!(
            version_release(Some(&other), &released, &sent),
            VersionRelease::NotOwned
        );
    }
}
