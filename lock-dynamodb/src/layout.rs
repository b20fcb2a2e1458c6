//! Table layouts: which attribute holds which field of a lock record, in which
//! encoding, and what a release does.
//!
//! Three presets ship: [`Layout::native`] (the default), [`Layout::python_dynamodb_lock`]
//! and [`Layout::java_lock_client`]. Every attribute name can be changed with the
//! `with_*` setters; [`Layout::validate`] (called by the store builder) refuses
//! layouts that cannot work.

use std::time::Duration;

use crate::errors::StoreConfigError;

/// How the lease duration is stored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum LeaseEncoding {
    /// A number of milliseconds (DynamoDB `N`). The native layout.
    MillisNumber,
    /// A number of seconds, with up to millisecond precision (DynamoDB `N`, for
    /// example `30` or `1.5`). python-dynamodb-lock.
    SecondsNumber,
    /// A string of milliseconds (DynamoDB `S`, for example `"20000"`). The Java
    /// client.
    MillisString,
}

/// How the "released" flag is stored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ReleasedEncoding {
    /// A DynamoDB `BOOL`, `true` when released, `false` otherwise. The native layout.
    Bool,
    /// The string `"1"` when released; the attribute is removed otherwise (the Java
    /// client treats the attribute's presence as "released").
    PresentAsOne,
}

/// What a write with `released = true` does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[non_exhaustive]
pub enum ReleaseMode {
    /// Keep the record and mark it released: fences stay monotonic across release.
    /// Needs a released attribute.
    MarkReleased,
    /// Delete the item (conditionally, on the same RVN): what python-dynamodb-lock
    /// does. [`Capabilities::keeps_released_records`](lock_core::Capabilities) is
    /// `false`, and the acquisition after a release creates the item afresh at
    /// the clock's floor ([`Fence::clock_floor`](lock_core::Fence::clock_floor)):
    /// above the deleted item's fences as long as the acquiring host's clock is
    /// not behind the one that created the item before by more than the time
    /// between the two creations
    /// ([`FencesAfterDeletion::ClockFloor`](lock_core::FencesAfterDeletion::ClockFloor)).
    Delete,
}

/// The attribute names and encodings of a lock table.
///
/// The partition key and sort key are DynamoDB strings (`S`). Records missing the
/// fence or released attribute (written by libraries that know neither) read as
/// fence 0 and not released.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Layout {
    pub(crate) partition_key: String,
    pub(crate) sort_key: Option<String>,
    pub(crate) no_sort_value: String,
    pub(crate) owner: String,
    pub(crate) rvn: String,
    pub(crate) lease: String,
    pub(crate) lease_encoding: LeaseEncoding,
    pub(crate) released: Option<String>,
    pub(crate) released_encoding: ReleasedEncoding,
    pub(crate) release_mode: ReleaseMode,
    pub(crate) fence: String,
    pub(crate) data: Option<String>,
    /// Data kept as top-level attributes of the item instead of one binary
    /// attribute (see [`Layout::with_data_as_attributes`]).
    pub(crate) data_as_attributes: bool,
    pub(crate) expires_at: Option<String>,
    pub(crate) default_expiry: Option<Duration>,
    /// The writer's wall-clock time of each write (see [`Layout::with_written`]).
    pub(crate) written: Option<String>,
    pub(crate) name: &'static str,
}

impl Default for Layout {
    fn default() -> Self {
        Self::native()
    }
}

impl Layout {
    /// This library's own layout, the default.
    ///
    /// | field | attribute | type |
    /// | --- | --- | --- |
    /// | partition key | `lock_key` | `S` (hash key) |
    /// | sort key | none (add one with [`with_sort_key`](Self::with_sort_key)) | `S` (range key) |
    /// | owner | `owner` | `S` |
    /// | rvn | `rvn` | `S` |
    /// | lease | `lease_ms` | `N`, milliseconds |
    /// | released | `released` | `BOOL` |
    /// | fence | `fence` | `N` |
    /// | data | `data` | `B` |
    /// | expires at | `expires_at` | `N`, epoch seconds, written only when the caller gives one |
    /// | written | `written_at` | `S`, epoch milliseconds on the writer's wall clock and the RVN they belong to, every write |
    ///
    /// Release marks the record released and keeps it, so fences stay monotonic.
    pub fn native() -> Self {
        Self {
            partition_key: "lock_key".into(),
            sort_key: None,
            no_sort_value: "-".into(),
            owner: "owner".into(),
            rvn: "rvn".into(),
            lease: "lease_ms".into(),
            lease_encoding: LeaseEncoding::MillisNumber,
            released: Some("released".into()),
            released_encoding: ReleasedEncoding::Bool,
            release_mode: ReleaseMode::MarkReleased,
            fence: "fence".into(),
            data: Some("data".into()),
            data_as_attributes: false,
            expires_at: Some("expires_at".into()),
            default_expiry: None,
            written: Some("written_at".into()),
            name: "native",
        }
    }

    /// The layout of python-dynamodb-lock (table `DynamoDBLockTable` by default).
    ///
    /// Hash key `lock_key` and range key `sort_key` (the store writes `-` when the
    /// lock key has no sort key, as the Python library does, and reads `-` back as
    /// "no sort key"), `owner_name`, `lease_duration` (`N`, seconds),
    /// `record_version_number`, `expiry_time` (`N`, epoch seconds; written on every
    /// write, now + 1 hour unless the caller gives a time, because the Python library
    /// cannot read an item without it). The fence is stored in an extra `fence`
    /// attribute, data in `data` (`B`) and the writer's wall-clock time in
    /// `written_at`, all of which the Python library keeps as "additional
    /// attributes".
    ///
    /// There is no released attribute: **release deletes the item**, conditionally
    /// on the RVN, like the Python library. The next acquisition starts the item
    /// again at the clock's floor, as [`ReleaseMode::Delete`] says.
    pub fn python_dynamodb_lock() -> Self {
        Self {
            partition_key: "lock_key".into(),
            sort_key: Some("sort_key".into()),
            no_sort_value: "-".into(),
            owner: "owner_name".into(),
            rvn: "record_version_number".into(),
            lease: "lease_duration".into(),
            lease_encoding: LeaseEncoding::SecondsNumber,
            released: None,
            released_encoding: ReleasedEncoding::Bool,
            release_mode: ReleaseMode::Delete,
            fence: "fence".into(),
            data: Some("data".into()),
            data_as_attributes: false,
            expires_at: Some("expiry_time".into()),
            default_expiry: Some(Duration::from_secs(3600)),
            written: Some("written_at".into()),
            name: "python-dynamodb-lock",
        }
    }

    /// The layout of the Java AmazonDynamoDBLockClient.
    ///
    /// Hash key `key` (no sort key; add the one your Java client uses with
    /// [`with_sort_key`](Self::with_sort_key)), `ownerName`, `leaseDuration` (`S`,
    /// milliseconds), `recordVersionNumber`, `isReleased` (the string `"1"` when
    /// released, absent otherwise), `data` (`B`). The fence is an extra `fence`
    /// attribute, the writer's wall-clock time an extra `writtenAt`. No TTL
    /// attribute.
    ///
    /// Release marks the item released (`isReleased = "1"`), which the Java client
    /// honours, and keeps the fence; use
    /// [`with_release_mode(ReleaseMode::Delete)`](Self::with_release_mode) to delete
    /// like the Java client's default `deleteLockOnRelease`.
    pub fn java_lock_client() -> Self {
        Self {
            partition_key: "key".into(),
            sort_key: None,
            no_sort_value: "-".into(),
            owner: "ownerName".into(),
            rvn: "recordVersionNumber".into(),
            lease: "leaseDuration".into(),
            lease_encoding: LeaseEncoding::MillisString,
            released: Some("isReleased".into()),
            released_encoding: ReleasedEncoding::PresentAsOne,
            release_mode: ReleaseMode::MarkReleased,
            fence: "fence".into(),
            data: Some("data".into()),
            data_as_attributes: false,
            expires_at: None,
            default_expiry: None,
            written: Some("writtenAt".into()),
            name: "java",
        }
    }

    /// Set the partition (hash) key attribute.
    pub fn with_partition_key(mut self, name: impl Into<String>) -> Self {
        self.partition_key = name.into();
        self
    }

    /// Use a sort (range) key attribute. Lock keys without a sort key are stored
    /// under the placeholder [`no_sort_value`](Self::with_no_sort_value) (`-`).
    pub fn with_sort_key(mut self, name: impl Into<String>) -> Self {
        self.sort_key = Some(name.into());
        self
    }

    /// Use no sort key: the table has a hash key only.
    pub fn without_sort_key(mut self) -> Self {
        self.sort_key = None;
        self
    }

    /// The sort key value written for lock keys that have none (default `-`).
    pub fn with_no_sort_value(mut self, value: impl Into<String>) -> Self {
        self.no_sort_value = value.into();
        self
    }

    /// Set the owner attribute.
    pub fn with_owner(mut self, name: impl Into<String>) -> Self {
        self.owner = name.into();
        self
    }

    /// Set the record version number attribute.
    pub fn with_rvn(mut self, name: impl Into<String>) -> Self {
        self.rvn = name.into();
        self
    }

    /// Set the lease attribute and its encoding.
    pub fn with_lease(mut self, name: impl Into<String>, encoding: LeaseEncoding) -> Self {
        self.lease = name.into();
        self.lease_encoding = encoding;
        self
    }

    /// Set the released attribute and its encoding.
    pub fn with_released(mut self, name: impl Into<String>, encoding: ReleasedEncoding) -> Self {
        self.released = Some(name.into());
        self.released_encoding = encoding;
        self
    }

    /// Store no released attribute; implies [`ReleaseMode::Delete`].
    pub fn without_released(mut self) -> Self {
        self.released = None;
        self.release_mode = ReleaseMode::Delete;
        self
    }

    /// Choose what a release does (the layout decides, not the caller).
    pub fn with_release_mode(mut self, mode: ReleaseMode) -> Self {
        self.release_mode = mode;
        self
    }

    /// Set the fence attribute (`N`).
    pub fn with_fence(mut self, name: impl Into<String>) -> Self {
        self.fence = name.into();
        self
    }

    /// Set the data attribute (`B`).
    pub fn with_data(mut self, name: impl Into<String>) -> Self {
        self.data = Some(name.into());
        self.data_as_attributes = false;
        self
    }

    /// Store no data: writes carrying data are refused as invalid.
    pub fn without_data(mut self) -> Self {
        self.data = None;
        self.data_as_attributes = false;
        self
    }

    /// Keep the data as top-level attributes of the item, the way
    /// python-dynamodb-lock keeps its `additional_attributes`: every attribute
    /// of an item that the layout does not name is data.
    ///
    /// The data is then a JSON object of DynamoDB attribute values in the
    /// service's wire format, one member per attribute:
    /// `{"job": {"S": "nightly"}, "tries": {"N": "3"}, "blob": {"B": "aGk="}}`
    /// (binary values in base64; `S`, `N`, `B`, `BOOL`, `NULL`, `M`, `L`, `SS`,
    /// `NS` and `BS` are accepted). Reads give the same form back, members in
    /// name order, and no data when the item has no such attribute. A write
    /// that replaces or clears the data removes the attributes the record had
    /// at the version it expects, so a takeover leaves none of the previous
    /// holder's behind; that costs a consistent read before the write, only
    /// for writes that replace data on a version (takeovers and data updates),
    /// never for heartbeats or for acquiring an absent key.
    ///
    /// A released record keeps no data attributes, so that acquiring a vacant
    /// key (absent or released) has none to remove: with
    /// [`ReleaseMode::MarkReleased`] a release removes them (reading the
    /// record first, like a takeover), and a release that would store data
    /// in the released record is refused as invalid.
    ///
    /// ```
    /// use lock_dynamodb::Layout;
    ///
    /// let layout = Layout::python_dynamodb_lock().with_data_as_attributes();
    /// assert!(layout.data_as_attributes());
    /// assert_eq!(layout.data(), None);
    /// layout.validate()?;
    /// # Ok::<(), lock_dynamodb::StoreConfigError>(())
    /// ```
    pub fn with_data_as_attributes(mut self) -> Self {
        self.data = None;
        self.data_as_attributes = true;
        self
    }

    /// Set the expiry (TTL) attribute (`N`, epoch seconds).
    pub fn with_expires_at(mut self, name: impl Into<String>) -> Self {
        self.expires_at = Some(name.into());
        self
    }

    /// Store no expiry attribute (no TTL).
    pub fn without_expires_at(mut self) -> Self {
        self.expires_at = None;
        self.default_expiry = None;
        self
    }

    /// Write `now + expiry` into the expiry attribute when the caller gives no
    /// expiry time (`None`: write nothing). The Python preset uses one hour.
    ///
    /// Whatever is asked, an expiry written is never earlier than the end of
    /// the lease written with it, doubled, plus ten minutes (room for clock
    /// drift, wall-clock skew against DynamoDB and a TTL sweep that starts
    /// early): a TTL never deletes a lock that is still held. With the native
    /// layout this is how to have DynamoDB clean up locks abandoned for good.
    ///
    /// With TTL enabled, DynamoDB deletes the item some time after that instant;
    /// the key's next acquisition starts again at the clock's floor
    /// ([`FencesAfterDeletion::ClockFloor`](lock_core::FencesAfterDeletion::ClockFloor)),
    /// above the deleted item's fences as long as the hosts' clocks differ by
    /// less than the time from the item's creation to its deletion: keep it far
    /// beyond any lease.
    /// A release that keeps the record ([`ReleaseMode::MarkReleased`]) writes no
    /// default expiry (it removes the attribute): the record is kept for its
    /// fence, so the time to live cleans up abandoned held locks, never
    /// released ones.
    pub fn with_default_expiry(mut self, expiry: Option<Duration>) -> Self {
        self.default_expiry = expiry;
        self
    }

    /// Set the attribute each write stamps with its writer's wall-clock time
    /// (`S`: epoch milliseconds, read when the request is built, so after the
    /// client counted its lease from the send, then a space and the RVN
    /// written with it). A stamp is believed only beside its own RVN: a
    /// library that updates the item without knowing the attribute (the Java
    /// client's heartbeats, python-dynamodb-lock's) changes the RVN and so
    /// leaves a stamp nobody trusts. A client given a
    /// [`max_clock_difference`](lock_core::LockClientBuilder::max_clock_difference)
    /// takes over a crashed holder's record once
    /// `written + lease × (1 + drift) + bound` has passed on its own wall
    /// clock; other clients ignore it. A record without it (written by another
    /// library, or before this attribute existed) is taken over by watching it.
    pub fn with_written(mut self, name: impl Into<String>) -> Self {
        self.written = Some(name.into());
        self
    }

    /// Stamp no write time: waiters always watch a record for its lease.
    pub fn without_written(mut self) -> Self {
        self.written = None;
        self
    }

    /// The write-time attribute, if the layout stamps writes.
    pub fn written(&self) -> Option<&str> {
        self.written.as_deref()
    }

    /// The partition key attribute.
    pub fn partition_key(&self) -> &str {
        &self.partition_key
    }
    /// The sort key attribute, if the table has one.
    pub fn sort_key(&self) -> Option<&str> {
        self.sort_key.as_deref()
    }
    /// The sort key value that stands for "no sort key".
    pub fn no_sort_value(&self) -> &str {
        &self.no_sort_value
    }
    /// The owner attribute.
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// The record version number attribute.
    pub fn rvn(&self) -> &str {
        &self.rvn
    }
    /// The lease attribute and its encoding.
    pub fn lease(&self) -> (&str, LeaseEncoding) {
        (&self.lease, self.lease_encoding)
    }
    /// The released attribute and its encoding, if any.
    pub fn released(&self) -> Option<(&str, ReleasedEncoding)> {
        self.released
            .as_deref()
            .map(|name| (name, self.released_encoding))
    }
    /// What a release does.
    pub fn release_mode(&self) -> ReleaseMode {
        self.release_mode
    }
    /// The fence attribute.
    pub fn fence(&self) -> &str {
        &self.fence
    }
    /// The data attribute, if any (none when the data is kept as top-level
    /// attributes).
    pub fn data(&self) -> Option<&str> {
        self.data.as_deref()
    }
    /// Whether the data is kept as top-level attributes
    /// ([`with_data_as_attributes`](Self::with_data_as_attributes)).
    pub fn data_as_attributes(&self) -> bool {
        self.data_as_attributes
    }
    /// The expiry (TTL) attribute, if any.
    pub fn expires_at(&self) -> Option<&str> {
        self.expires_at.as_deref()
    }
    /// The expiry written when the caller gives none.
    pub fn default_expiry(&self) -> Option<Duration> {
        self.default_expiry
    }
    /// The preset this layout started from, by the name
    /// [`named`](Self::named) takes: `native`, `python-dynamodb-lock` or
    /// `java`.
    pub fn preset_name(&self) -> &'static str {
        self.name
    }

    /// The names of the presets, as `lockctl --layout`, Python's
    /// `DynamoDBStore(layout=...)` and [`named`](Self::named) take them.
    pub const NAMES: [&'static str; 3] = ["native", "python-dynamodb-lock", "java"];

    /// The preset called `name`, in the one vocabulary of every surface
    /// (Rust, Python, `lockctl --layout`): `native` ([`native`](Self::native)),
    /// `python-dynamodb-lock` ([`python_dynamodb_lock`](Self::python_dynamodb_lock))
    /// or `java` ([`java_lock_client`](Self::java_lock_client)). lockctl's
    /// older spellings `default` and `python` (and `java-lock-client`) are
    /// accepted as aliases.
    ///
    /// ```
    /// use lock_dynamodb::Layout;
    /// assert_eq!(Layout::named("python")?.preset_name(), "python-dynamodb-lock");
    /// assert!(Layout::named("pyhton").unwrap_err().to_string().contains("native, python-dynamodb-lock or java"));
    /// # Ok::<(), lock_dynamodb::StoreConfigError>(())
    /// ```
    pub fn named(name: &str) -> Result<Self, StoreConfigError> {
        match name {
            "native" | "default" => Ok(Self::native()),
            "python-dynamodb-lock" | "python" => Ok(Self::python_dynamodb_lock()),
            "java" | "java-lock-client" => Ok(Self::java_lock_client()),
            other => Err(StoreConfigError::UnknownLayout {
                name: other.to_owned(),
            }),
        }
    }

    /// All attribute names the layout uses, with what they are for.
    pub(crate) fn attributes(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![("partition key", self.partition_key.as_str())];
        if let Some(sort) = &self.sort_key {
            out.push(("sort key", sort));
        }
        out.push(("owner", &self.owner));
        out.push(("rvn", &self.rvn));
        out.push(("lease", &self.lease));
        if let Some(released) = &self.released {
            out.push(("released", released));
        }
        out.push(("fence", &self.fence));
        if let Some(data) = &self.data {
            out.push(("data", data));
        }
        if let Some(expires) = &self.expires_at {
            out.push(("expires at", expires));
        }
        if let Some(written) = &self.written {
            out.push(("written", written));
        }
        out
    }

    /// Check that the layout can work: non-empty, distinct attribute names; a
    /// released attribute when release marks; a non-empty "no sort key" value;
    /// an expiry written on every write for the python-dynamodb-lock preset.
    pub fn validate(&self) -> Result<(), StoreConfigError> {
        let attributes = self.attributes();
        for (i, (role, name)) in attributes.iter().enumerate() {
            if name.is_empty() {
                return Err(StoreConfigError::EmptyAttributeName { role });
            }
            if name.len() > 255 {
                return Err(StoreConfigError::AttributeNameTooLong {
                    role,
                    name: (*name).to_owned(),
                });
            }
            if let Some((other, _)) = attributes[..i].iter().find(|(_, n)| n == name) {
                return Err(StoreConfigError::DuplicateAttribute {
                    name: (*name).to_owned(),
                    first: other,
                    second: role,
                });
            }
        }
        if self.release_mode == ReleaseMode::MarkReleased && self.released.is_none() {
            return Err(StoreConfigError::ReleaseNeedsAttribute);
        }
        if self.sort_key.is_some() && self.no_sort_value.is_empty() {
            return Err(StoreConfigError::EmptyNoSortValue);
        }
        // python-dynamodb-lock fails on an item without its expiry_time (and
        // on one with it but no value): it must be written on every write.
        if self.name == "python-dynamodb-lock"
            && (self.expires_at.is_none() || self.default_expiry.is_none())
        {
            return Err(StoreConfigError::PythonNeedsExpiry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid() {
        for layout in [
            Layout::native(),
            Layout::python_dynamodb_lock(),
            Layout::java_lock_client(),
        ] {
            assert_eq!(layout.validate(), Ok(()), "{layout:?}");
        }
    }

    #[test]
    fn duplicate_names_are_refused() {
        let layout = Layout::native().with_owner("rvn");
        assert_eq!(
            layout.validate(),
            Err(StoreConfigError::DuplicateAttribute {
                name: "rvn".into(),
                first: "owner",
                second: "rvn",
            })
        );
    }

    #[test]
    fn marking_release_needs_an_attribute() {
        let layout = Layout::native()
            .without_released()
            .with_release_mode(ReleaseMode::MarkReleased);
        assert_eq!(
            layout.validate(),
            Err(StoreConfigError::ReleaseNeedsAttribute)
        );
        assert_eq!(
            Layout::native().without_released().release_mode(),
            ReleaseMode::Delete
        );
    }

    #[test]
    fn data_as_attributes_replaces_the_data_attribute() {
        assert_eq!(
            Layout::native().with_data_as_attributes().validate(),
            Ok(())
        );
        let java = Layout::java_lock_client()
            .with_release_mode(ReleaseMode::Delete)
            .with_data_as_attributes();
        assert_eq!(java.validate(), Ok(()));
        assert_eq!(java.data(), None);
        let back = java.with_data("payload");
        assert!(!back.data_as_attributes());
        assert_eq!(back.data(), Some("payload"));
    }

    #[test]
    fn empty_names_are_refused() {
        assert_eq!(
            Layout::native().with_fence("").validate(),
            Err(StoreConfigError::EmptyAttributeName { role: "fence" })
        );
        assert_eq!(
            Layout::native()
                .with_sort_key("sk")
                .with_no_sort_value("")
                .validate(),
            Err(StoreConfigError::EmptyNoSortValue)
        );
    }
}
