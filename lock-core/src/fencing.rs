//! Fences checked at the resource: the rule every fenced write applies, on
//! any store, and the one error a refusal is.
//!
//! A lease alone cannot stop a holder that was paused (a GC pause, a frozen
//! VM, a slow network) past its lease from writing after the next holder
//! did. A fence can, if the resource checks it: each write carries the
//! writer's fence and the key of the lock it came from, and the resource
//! remembers the highest fence that wrote it and which lock's it was. A
//! write is then admitted when
//!
//! * nothing fenced the resource yet, or
//! * its fence is of the same lock and at least the highest that wrote
//!   (equal: the same holder writes again),
//!
//! and refused otherwise, with nothing changed. Fences of two locks do not
//! compare, so a fence of another lock than the one that first fenced a
//! resource is refused too.
//!
//! A lock is named by its key as it prints ([`LockKey`](crate::LockKey)'s
//! `Display`, which no two keys share); a [reader-writer lock](crate::RwLock)'s
//! writers and readers alike by its write lock's key
//! ([`RwLock::writer_key`](crate::RwLock::writer_key),
//! [`ReadView::writer_key`](crate::ReadView::writer_key)).
//!
//! [`admit`] is that rule where the check runs in the client (an object
//! written on the ETag it was read at, an in-process resource); where the
//! store checks it (a DynamoDB condition, a PostgreSQL function), the store
//! applies the same rule and the helper reports its refusal as a
//! [`FenceRefused`].
//!
//! ```
//! use lock_core::Fence;
//! use lock_core::fencing::{admit, FenceRefused};
//!
//! // Nothing fenced the resource yet: admitted.
//! assert!(admit("orders/42", None, "orders", Fence(7)).is_ok());
//! // Fence 7 of "orders" wrote it; a holder paused past its lease comes
//! // back with fence 6:
//! let refused = admit("orders/42", Some(("orders", Fence(7))), "orders", Fence(6));
//! assert!(matches!(refused, Err(FenceRefused::Stale { highest: Fence(7), .. })));
//! ```

use crate::Fence;

/// Why a resource refused a write's fence (the same on every store).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FenceRefused {
    /// A fence lower than the highest that wrote the resource: the lock was
    /// taken over since, and this writer must stop.
    #[error(
        "fence {presented} for resource {resource} is stale: fence {highest} wrote it already (the lock was taken over)"
    )]
    Stale {
        /// The resource.
        resource: String,
        /// The fence presented.
        presented: Fence,
        /// The highest fence that wrote the resource.
        highest: Fence,
    },
    /// The resource is fenced by another lock, whose fences do not compare
    /// with this one's: pass the fence of the lock that guards it.
    #[error("resource {resource} is fenced by lock {fenced_by}, not by lock {presented_by}")]
    OtherLock {
        /// The resource.
        resource: String,
        /// The key of the lock whose fences the resource takes.
        fenced_by: String,
        /// The key of the lock whose fence was presented.
        presented_by: String,
    },
    /// Refused before anything was written: what to change.
    #[error("{reason}")]
    InvalidInput {
        /// What is wrong and what to change.
        reason: String,
    },
}

/// What a resource last written by `current` (the key of the lock whose
/// fence wrote it, and that fence), if anything fenced it, does with
/// `presented` of the lock `presented_by`: see the [module docs](self).
pub fn admit(
    resource: &str,
    current: Option<(&str, Fence)>,
    presented_by: &str,
    presented: Fence,
) -> Result<(), FenceRefused> {
    check_input(resource, presented_by, presented)?;
    let Some((fenced_by, highest)) = current else {
        return Ok(());
    };
    if fenced_by != presented_by {
        return Err(FenceRefused::OtherLock {
            resource: resource.to_owned(),
            fenced_by: fenced_by.to_owned(),
            presented_by: presented_by.to_owned(),
        });
    }
    if presented < highest {
        return Err(FenceRefused::Stale {
            resource: resource.to_owned(),
            presented,
            highest,
        });
    }
    Ok(())
}

/// What a resource does with a reader's fence (a reader of a
/// [reader-writer lock](crate::RwLock) presents the writer fence it was
/// admitted with, [`ReadView::fence`](crate::ReadView::fence)): admitted
/// when nothing fenced the resource yet, or by [`admit`]'s rule, fence 0
/// (admitted before any writer) being stale once a writer wrote. A resource
/// that admits a read should then raise its highest fence to the reader's,
/// as a write would: a crashed writer whose record the readers cleared (with
/// the next fence) is then refused when it comes back.
pub fn admit_read(
    resource: &str,
    current: Option<(&str, Fence)>,
    presented_by: &str,
    presented: Fence,
) -> Result<(), FenceRefused> {
    match current {
        None if !resource.is_empty() && !presented_by.is_empty() => Ok(()),
        Some((_, highest)) if presented.get() == 0 && !resource.is_empty() => {
            Err(FenceRefused::Stale {
                resource: resource.to_owned(),
                presented,
                highest,
            })
        }
        _ => admit(resource, current, presented_by, presented),
    }
}

/// The checks every fenced write makes before it sends anything: a resource
/// with a name, a lock key, and a fence a lock grants (1 or more; the store
/// may limit the name further).
pub fn check_input(resource: &str, lock: &str, fence: Fence) -> Result<(), FenceRefused> {
    let reason = if resource.is_empty() {
        "a fenced resource needs a name (the row, item, object or file the lock protects)"
            .to_owned()
    } else if lock.is_empty() {
        format!(
            "resource {resource}: the fence's lock key is empty (pass the key of the lock the fence came from)"
        )
    } else if fence.get() == 0 {
        format!(
            "fence 0 for resource {resource}: a lock's fences start at 1 (pass a held lock's fence)"
        )
    } else {
        return Ok(());
    };
    Err(FenceRefused::InvalidInput { reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_and_higher_fences_are_admitted_lower_ones_and_other_locks_refused() {
        assert_eq!(admit("r", None, "a", Fence(1)), Ok(()));
        assert_eq!(admit("r", Some(("a", Fence(3))), "a", Fence(3)), Ok(()));
        assert_eq!(admit("r", Some(("a", Fence(3))), "a", Fence(4)), Ok(()));
        assert_eq!(
            admit("r", Some(("a", Fence(3))), "a", Fence(2)),
            Err(FenceRefused::Stale {
                resource: "r".into(),
                presented: Fence(2),
                highest: Fence(3)
            })
        );
        assert_eq!(
            admit("r", Some(("a", Fence(3))), "b", Fence(9)),
            Err(FenceRefused::OtherLock {
                resource: "r".into(),
                fenced_by: "a".into(),
                presented_by: "b".into()
            })
        );
    }

    #[test]
    fn a_reader_is_admitted_with_fence_zero_only_before_any_writer() {
        assert_eq!(admit_read("r", None, "a", Fence(0)), Ok(()));
        assert_eq!(
            admit_read("r", Some(("a", Fence(3))), "a", Fence(3)),
            Ok(())
        );
        assert!(matches!(
            admit_read("r", Some(("a", Fence(3))), "a", Fence(0)),
            Err(FenceRefused::Stale { .. })
        ));
        assert!(matches!(
            admit_read("r", Some(("a", Fence(3))), "a", Fence(2)),
            Err(FenceRefused::Stale { .. })
        ));
        assert!(matches!(
            admit_read("", None, "a", Fence(1)),
            Err(FenceRefused::InvalidInput { .. })
        ));
    }

    #[test]
    fn bad_input_is_refused_saying_what_to_change() {
        let says = |result: Result<(), FenceRefused>, what: &str| match result {
            Err(FenceRefused::InvalidInput { reason }) => {
                assert!(reason.contains(what), "{reason}")
            }
            other => panic!("{other:?}"),
        };
        says(admit("", None, "a", Fence(1)), "needs a name");
        says(admit("r", None, "", Fence(1)), "lock key is empty");
        says(
            admit("r", Some(("a", Fence(3))), "a", Fence(0)),
            "start at 1",
        );
    }
}
