//! A resource in this process that checks fences: what a database table, an
//! item or an object that refuses stale writers does (see `lock-postgres`'s
//! fence guard), for tests, simulations, demos and programs whose protected
//! state lives in one process.

use std::collections::HashMap;
use std::sync::Mutex;

use lock_core::fencing::admit;
use lock_core::{Fence, LockKey};

pub use lock_core::FenceRefused;

/// Values by resource name, each written only with a fence at least as high
/// as the highest that wrote it before, of the lock that first wrote it
/// (the rule of [`lock_core::fencing`]).
///
/// ```
/// use lock_core::{Fence, LockKey};
/// use lock_memory::{FencedResource, FenceRefused};
///
/// let orders = FencedResource::new();
/// let key = LockKey::new("orders");
/// orders.write("order/42", &key, Fence(7), "shipped").unwrap();
/// // A holder paused past its lease comes back with its old fence:
/// let refused = orders.write("order/42", &key, Fence(6), "cancelled");
/// assert!(matches!(refused, Err(FenceRefused::Stale { highest: Fence(7), .. })));
/// assert_eq!(orders.read("order/42"), Some(("shipped", Fence(7))));
/// ```
#[derive(Debug)]
pub struct FencedResource<T> {
    entries: Mutex<HashMap<String, Entry<T>>>,
}

#[derive(Debug)]
struct Entry<T> {
    /// The key of the lock whose fences write the resource.
    lock: String,
    fence: Fence,
    /// `None` for a resource only read so far: the readers' fence is kept,
    /// nothing was written.
    value: Option<T>,
}

impl<T> Default for FencedResource<T> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> FencedResource<T> {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry<T>>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write `value` to `resource` with `fence` of the lock `lock` (a
    /// guard's [`key`](lock_core::LockView::key) and
    /// [`fence`](lock_core::LockView::fence)): taken when the fence is at
    /// least the highest that wrote `resource` and of the same lock, refused
    /// otherwise with nothing changed.
    pub fn write(
        &self,
        resource: &str,
        lock: &LockKey,
        fence: Fence,
        value: T,
    ) -> Result<(), FenceRefused> {
        let lock = lock.to_string();
        let mut entries = self.entries();
        let current = entries
            .get(resource)
            .map(|entry| (entry.lock.as_str(), entry.fence));
        admit(resource, current, &lock, fence)?;
        entries.insert(
            resource.to_owned(),
            Entry {
                lock,
                fence,
                value: Some(value),
            },
        );
        Ok(())
    }

    /// The highest fence that wrote `resource`, if any did.
    pub fn highest(&self, resource: &str) -> Option<Fence> {
        self.entries().get(resource).map(|entry| entry.fence)
    }
}

impl<T: Clone> FencedResource<T> {
    /// Read `resource` as a reader of a reader-writer lock presenting
    /// `fence` (its [`ReadView::fence`](lock_core::ReadView::fence)) of the
    /// lock `lock` (the lock's [`writer_key`](lock_core::RwLock::writer_key)):
    /// refused when a higher writer fence wrote it, admitted otherwise
    /// ([`admit_read`](lock_core::fencing::admit_read)), raising the
    /// resource's highest fence to `fence` so that a writer older than the
    /// reader is refused from then on (also when nothing wrote it yet: the
    /// fence is kept). `None` when nothing wrote it yet.
    pub fn read_fenced(
        &self,
        resource: &str,
        lock: &LockKey,
        fence: Fence,
    ) -> Result<Option<T>, FenceRefused> {
        let lock = lock.to_string();
        let mut entries = self.entries();
        let current = entries
            .get(resource)
            .map(|entry| (entry.lock.as_str(), entry.fence));
        lock_core::fencing::admit_read(resource, current, &lock, fence)?;
        if let Some(entry) = entries.get_mut(resource) {
            entry.fence = entry.fence.max(fence);
            return Ok(entry.value.clone());
        }
        // Nothing wrote it yet: the readers' fence is kept all the same, so a
        // writer older than them (a crashed one they cleared) is refused.
        if fence.get() > 0 {
            entries.insert(
                resource.to_owned(),
                Entry {
                    lock,
                    fence,
                    value: None,
                },
            );
        }
        Ok(None)
    }

    /// The value of `resource` and the highest fence it has seen (the one
    /// that wrote it, or a later reader's).
    pub fn read(&self, resource: &str) -> Option<(T, Fence)> {
        self.entries()
            .get(resource)
            .and_then(|entry| Some((entry.value.clone()?, entry.fence)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn equal_and_higher_fences_write_lower_ones_and_other_locks_are_refused() {
        let resource = FencedResource::new();
        let orders = LockKey::new("orders");
        resource.write("o/1", &orders, Fence(3), 1).unwrap();
        resource.write("o/1", &orders, Fence(3), 2).unwrap();
        resource.write("o/1", &orders, Fence(5), 3).unwrap();
        assert_eq!(
            resource.write("o/1", &orders, Fence(4), 4),
            Err(FenceRefused::Stale {
                resource: "o/1".into(),
                presented: Fence(4),
                highest: Fence(5)
            })
        );
        let invoices = LockKey::new("invoices");
        assert!(matches!(
            resource.write("o/1", &invoices, Fence(9), 5),
            Err(FenceRefused::OtherLock { .. })
        ));
        assert_eq!(resource.read("o/1"), Some((3, Fence(5))));
        assert_eq!(resource.highest("o/2"), None);
    }

    #[test]
    fn a_partition_with_a_slash_is_another_lock_than_a_sort_key() {
        // Two locks with their own fence counters: the second's fence 1 is
        // not comparable with the first's fence 5, whatever they print as.
        let resource = FencedResource::new();
        resource
            .write("r", &LockKey::new("a/b"), Fence(5), "plain")
            .unwrap();
        assert!(matches!(
            resource.write("r", &LockKey::with_sort("a", "b"), Fence(6), "sorted"),
            Err(FenceRefused::OtherLock { .. })
        ));
        assert_eq!(resource.read("r"), Some(("plain", Fence(5))));
    }

    #[test]
    fn a_read_of_a_resource_nothing_wrote_keeps_the_readers_fence() {
        // Readers cleared a crashed writer (fence 1) with fence 2 and read
        // the resource before anyone wrote it: the crashed writer, back, is
        // refused.
        let resource: FencedResource<&str> = FencedResource::new();
        let lock = LockKey::new("config/writer");
        assert_eq!(resource.read_fenced("settings", &lock, Fence(2)), Ok(None));
        assert!(matches!(
            resource.write("settings", &lock, Fence(1), "zombie"),
            Err(FenceRefused::Stale { .. })
        ));
        assert_eq!(resource.read("settings"), None, "nothing written");
        resource.write("settings", &lock, Fence(3), "new").unwrap();
        assert_eq!(resource.read("settings"), Some(("new", Fence(3))));
    }

    #[test]
    fn fence_zero_and_a_nameless_resource_are_refused_saying_what_to_change() {
        let resource = FencedResource::new();
        let key = LockKey::new("orders");
        let zero = resource.write("o/1", &key, Fence(0), ()).unwrap_err();
        assert!(zero.to_string().contains("start at 1"), "{zero}");
        let nameless = resource.write("", &key, Fence(1), ()).unwrap_err();
        assert!(nameless.to_string().contains("needs a name"), "{nameless}");
        assert_eq!(resource.highest("o/1"), None, "nothing written");
    }
}
